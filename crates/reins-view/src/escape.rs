//! Data in HTML. The page embeds the session as JSON in a `<script type="application/json">` block; the
//! script reads it with `JSON.parse(block.textContent)` and builds the DOM with `textContent`, so nothing
//! from the session is ever parsed as HTML or run as code.

use serde::Serialize;

/// `value` as JSON that is safe inside a `<script type="application/json">` element: `<`, `>` and `&`
/// are written as `\u003c`, `\u003e`, `\u0026` (so no `</script>`, `<!--` or `<script` can end or open
/// anything), and U+2028/U+2029 as `\u2028`/`\u2029` (line terminators to older script parsers). Each of
/// those characters can only occur inside a JSON string, where the escape means the same character:
/// `JSON.parse` gives back exactly `value`.
pub fn json_for_html(value: &impl Serialize) -> serde_json::Result<String> {
    let json = serde_json::to_string(value)?;
    Ok(escape_json_text(&json))
}

/// The escaping of [`json_for_html`] applied to JSON text already written.
pub fn escape_json_text(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Text escaped for HTML element content and quoted attribute values (`&`, `<`, `>`, `"`, `'`).
pub fn html_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closing_script_tag_and_line_separators_are_escaped() {
        let v = serde_json::json!({"t": "</script><script>alert(1)</script>\u{2028}\u{2029}&<!--"});
        let out = json_for_html(&v).unwrap();
        assert!(!out.contains('<') && !out.contains('>') && !out.contains('&'));
        assert!(!out.contains('\u{2028}') && !out.contains('\u{2029}'));
        assert!(out.contains("\\u003c/script\\u003e"));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap(), v);
    }

    #[test]
    fn html_text_escapes_markup() {
        assert_eq!(html_text("<a href='x'>\"&"), "&lt;a href=&#39;x&#39;&gt;&quot;&amp;");
    }
}
