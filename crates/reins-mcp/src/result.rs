//! Maps an MCP `tools/call` result to a Reins tool result. The core bounds the text afterwards.

use reins::{ToolError, ToolOutput};
use serde_json::Value;

/// Maps the JSON of a `CallToolResult` (`content`, `structuredContent`, `isError`) to what the model sees.
///
/// - text blocks are joined by newlines;
/// - an image block whose data is a PNG, JPEG, GIF or WebP image within the image cap passes through as an
///   image (each adapter shows it natively); any other image, and audio, becomes a one-line placeholder with
///   its MIME type and size; embedded text resources contribute their text, links and binary resources
///   their URI;
/// - with no content block at all, structured content is shown as compact JSON;
/// - `isError: true` makes a [`ToolError::Failed`] with the same text.
///
/// ```
/// use serde_json::json;
/// let out = reins_mcp::map_call_result(&json!({"content": [{"type": "text", "text": "hi"}]}));
/// assert_eq!(out, Ok(reins::ToolOutput::Text("hi".into())));
/// let err = reins_mcp::map_call_result(&json!({"content": [{"type": "text", "text": "no"}], "isError": true}));
/// assert_eq!(err, Err(reins::ToolError::Failed("no".into())));
/// ```
pub fn map_call_result(result: &Value) -> Result<ToolOutput, ToolError> {
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    let blocks = result.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut images = Vec::new();
    let parts: Vec<String> = blocks
        .iter()
        .filter(|b| match image_of(b) {
            Some(image) => {
                images.push(image);
                false
            }
            None => true,
        })
        .map(describe_block)
        .collect();
    let structured = result.get("structuredContent");
    let text = if parts.is_empty() {
        match structured {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        }
    } else {
        parts.join("\n")
    };
    if is_error {
        let text = if text.is_empty() { "the MCP tool reported an error without a message".to_owned() } else { text };
        return Err(ToolError::Failed(text));
    }
    if !images.is_empty() {
        return Ok(ToolOutput::Parts { text, images });
    }
    Ok(ToolOutput::Text(text))
}

/// Maps the JSON of a `ReadResourceResult` (`contents`) to what the model sees: text contents as text (headed
/// by their URI when there are several), a blob that is a valid PNG, JPEG, GIF or WebP image as an image, any
/// other blob as a one-line description with its URI, MIME type and size — never its bytes.
///
/// ```
/// use serde_json::json;
/// let one = json!({"contents": [{"uri": "file:///a", "text": "hello"}]});
/// assert_eq!(reins_mcp::result::map_read_result(&one).into_text(), "hello");
/// let blob = json!({"contents": [{"uri": "file:///b", "mimeType": "application/zip", "blob": "AAAA"}]});
/// assert_eq!(
///     reins_mcp::result::map_read_result(&blob).into_text(),
///     "[resource file:///b: application/zip, about 3 bytes, not shown]"
/// );
/// ```
pub fn map_read_result(result: &Value) -> ToolOutput {
    let contents = result.get("contents").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut images = Vec::new();
    let mut parts = Vec::with_capacity(contents.len());
    for c in contents {
        let uri = c.get("uri").and_then(Value::as_str).unwrap_or("?");
        let mime = c.get("mimeType").and_then(Value::as_str);
        if let Some(text) = c.get("text").and_then(Value::as_str) {
            parts.push(if contents.len() == 1 { text.to_owned() } else { format!("[resource {uri}]\n{text}") });
        } else if let Some(blob) = c.get("blob").and_then(Value::as_str) {
            match reins::Image::from_base64(blob) {
                Ok(image) if mime.is_none_or(|m| m.starts_with("image/")) => {
                    images.push(image);
                    parts.push(format!("[resource {uri}: {}, shown as an image]", mime.unwrap_or("image")));
                }
                _ => parts.push(format!(
                    "[resource {uri}: {}, about {} bytes, not shown]",
                    mime.unwrap_or("binary"),
                    blob.len() / 4 * 3
                )),
            }
        } else {
            parts.push(format!("[resource {uri}: no content]"));
        }
    }
    if parts.is_empty() {
        parts.push("[the resource has no contents]".to_owned());
    }
    let text = parts.join("\n");
    if images.is_empty() { ToolOutput::Text(text) } else { ToolOutput::Parts { text, images } }
}

/// Maps the JSON of a `GetPromptResult` (`messages`, each a `role` and a content block) to a prompt: one user
/// message is its text alone; several are each headed by their role (`[user]`, `[assistant]`). Images pass
/// through as images; other blocks are described as in [`map_call_result`].
pub fn map_prompt_result(result: &Value) -> ToolOutput {
    let messages = result.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut images = Vec::new();
    let mut parts = Vec::with_capacity(messages.len());
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        let block = m.get("content").cloned().unwrap_or_default();
        let text = match image_of(&block) {
            Some(image) => {
                images.push(image);
                "[image]".to_owned()
            }
            None => describe_block(&block),
        };
        let lone_user = messages.len() == 1 && role == "user";
        parts.push(if lone_user { text } else { format!("[{role}]\n{text}") });
    }
    let text = parts.join("\n\n");
    if images.is_empty() { ToolOutput::Text(text) } else { ToolOutput::Parts { text, images } }
}

/// The image of an `image` block, when its data is one Reins takes.
fn image_of(block: &Value) -> Option<reins::Image> {
    if block.get("type").and_then(Value::as_str) != Some("image") {
        return None;
    }
    reins::Image::from_base64(block.get("data")?.as_str()?).ok()
}

fn describe_block(block: &Value) -> String {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    let str_field = |key: &str| block.get(key).and_then(Value::as_str);
    match kind {
        "text" => str_field("text").unwrap_or_default().to_owned(),
        "image" | "audio" => {
            let mime = str_field("mimeType").unwrap_or("unknown type");
            let size = str_field("data").map_or(0, |d| d.len() / 4 * 3);
            format!("[{kind}: {mime}, about {size} bytes, not shown]")
        }
        "resource" => {
            let res = block.get("resource");
            let uri = res.and_then(|r| r.get("uri")).and_then(Value::as_str).unwrap_or("?");
            match res.and_then(|r| r.get("text")).and_then(Value::as_str) {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => {
                    let mime = res.and_then(|r| r.get("mimeType")).and_then(Value::as_str).unwrap_or("binary");
                    format!("[resource {uri}: {mime}, not shown]")
                }
            }
        }
        "resource_link" => {
            let uri = str_field("uri").unwrap_or("?");
            match str_field("name") {
                Some(name) => format!("[resource link {uri} ({name})]"),
                None => format!("[resource link {uri}]"),
            }
        }
        other => format!("[{} content, not shown]", if other.is_empty() { "untyped" } else { other }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn an_image_block_passes_through_as_an_image() {
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
        let r = json!({"content": [
            {"type": "text", "text": "a chart"},
            {"type": "image", "data": png, "mimeType": "image/png"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        ]});
        let Ok(ToolOutput::Parts { text, images }) = map_call_result(&r) else { panic!("{:?}", map_call_result(&r)) };
        assert_eq!(text, "a chart\n[image: image/png, about 3 bytes, not shown]");
        assert_eq!(images, vec![reins::Image::from_base64(png).unwrap()]);
    }

    #[test]
    fn every_kind_of_content_maps_to_text() {
        let r = json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "body"}},
            {"type": "resource", "resource": {"uri": "file:///b", "blob": "AA==", "mimeType": "image/gif"}},
            {"type": "resource_link", "uri": "file:///y", "name": "y"},
            {"type": "hologram"}
        ], "structuredContent": {"ignored": true}});
        assert_eq!(
            map_call_result(&r).unwrap().into_text(),
            "a\n[image: image/png, about 3 bytes, not shown]\n[resource file:///x]\nbody\n\
             [resource file:///b: image/gif, not shown]\n[resource link file:///y (y)]\n[hologram content, not shown]"
        );
        assert_eq!(map_call_result(&json!({"structuredContent": {"n": 1}})).unwrap().into_text(), r#"{"n":1}"#);
        assert_eq!(map_call_result(&json!({})).unwrap().into_text(), "");
        assert_eq!(
            map_call_result(&json!({"isError": true})),
            Err(ToolError::Failed("the MCP tool reported an error without a message".into()))
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,10}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("(type|text|content|isError|data|resource|uri|[a-z]{1,4})", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_maps_without_panicking(v in json_value()) {
            let _ = map_call_result(&v);
            let _ = map_call_result(&json!({"content": [v.clone()], "isError": true}));
            let _ = map_call_result(&json!({"content": v}));
        }
    }
}
