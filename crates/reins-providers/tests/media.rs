//! Images and structured output on the wire, against a local hyper server: an image from the prompt and
//! from a tool result reaches each adapter in its API's native form (Responses `input_image`, Chat
//! `image_url` parts — a tool result's images in a user message right after the tool messages —, Anthropic
//! `image` blocks, also inside `tool_result`), and the bodies pass the official SDK types
//! (`tests/contract/check_contract.py`). With only the final-answer tool on offer the OpenAI adapters send
//! the native JSON-schema format instead of the tool; with other tools, the tools.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{Reply, Server, dir, fixture, sdk_python, text_reply};
use reins::{
    Agent, Conversation, FnTool, Image, Message, Model, ModelRequest, OutputSchema, Registry, Status, ToolCall,
    ToolOutput, ToolResult, ToolSpec,
};
use reins_providers::{Api, Provider};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A real 1×1 PNG.
const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn png() -> Image {
    Image::from_base64(PNG_1X1).unwrap()
}

/// A 3×2 GIF header (enough for the sniffer; never decoded by Reins).
fn gif() -> Image {
    Image::from_bytes(b"GIF89a\x03\x00\x02\x00\x00\x00\x00;".to_vec()).unwrap()
}

const APIS: [Api; 3] = [Api::OpenAiResponses, Api::OpenAiChat, Api::Anthropic];

fn look_spec() -> ToolSpec {
    ToolSpec {
        name: "screenshot".into(),
        description: "Takes a screenshot.".into(),
        input_schema: json!({"type": "object", "properties": {}}),
    }
}

/// A prompt with two images, a tool call, and its result with an image and text.
fn image_request() -> ModelRequest {
    ModelRequest {
        instructions: None,
        messages: Conversation::from_messages(vec![
            Message::user_with_images("What differs between these?", vec![png(), gif()]),
            Message::assistant("", vec![ToolCall::new("call_1", "screenshot", json!({}))]),
            Message::ToolResult(ToolResult { images: vec![png()], ..ToolResult::new("call_1", "the screen", false) }),
        ]),
        tools: Arc::from(vec![look_spec()]),
        cache_key: None,
    }
}

fn provider(api: Api, server: &Server, stream: bool) -> Provider {
    let base = if api == Api::Anthropic { server.url("") } else { server.url("/v1") };
    Provider::builder(api, "gpt-4.1-mini")
        .base_url(base)
        .api_key(Some("sk-test".into()))
        .stream(stream)
        .build()
        .unwrap()
}

async fn capture(api: Api, stream: bool, request: &ModelRequest) -> Value {
    let server = Server::start(vec![text_reply(api, stream)]).await;
    provider(api, &server, stream).generate(request, &CancellationToken::new()).await.unwrap();
    server.requests()[0].json()
}

fn png_url() -> String {
    format!("data:image/png;base64,{PNG_1X1}")
}

/// The image parts of each API, as the tests expect them.
fn assert_native(api: Api, body: &Value) {
    match api {
        Api::OpenAiResponses => {
            let input = body["input"].as_array().unwrap();
            let prompt = &input[0]["content"];
            assert_eq!(prompt[0], json!({"type": "input_text", "text": "What differs between these?"}));
            assert_eq!(prompt[1], json!({"type": "input_image", "image_url": png_url(), "detail": "auto"}));
            assert_eq!(prompt[2]["image_url"].as_str().map(|u| u.starts_with("data:image/gif;base64,")), Some(true));
            let out = input.iter().find(|i| i["type"] == "function_call_output").unwrap();
            assert_eq!(out["call_id"], "call_1");
            assert_eq!(
                out["output"],
                json!([{"type": "input_text", "text": "the screen"},
                       {"type": "input_image", "image_url": png_url(), "detail": "auto"}])
            );
        }
        Api::OpenAiChat => {
            let messages = body["messages"].as_array().unwrap();
            let prompt = &messages[0]["content"];
            assert_eq!(prompt[0], json!({"type": "text", "text": "What differs between these?"}));
            assert_eq!(prompt[1], json!({"type": "image_url", "image_url": {"url": png_url(), "detail": "auto"}}));
            // The tool message holds the text; its image follows in a user message.
            assert_eq!(messages[2], json!({"role": "tool", "tool_call_id": "call_1", "content": "the screen"}));
            assert_eq!(messages[3]["role"], "user");
            assert!(messages[3]["content"][0]["text"].as_str().unwrap().contains("call_1"));
            assert_eq!(
                messages[3]["content"][1],
                json!({"type": "image_url", "image_url": {"url": png_url(), "detail": "auto"}})
            );
            assert_eq!(messages.len(), 4);
        }
        Api::Anthropic => {
            let messages = body["messages"].as_array().unwrap();
            let image =
                json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1}});
            assert_eq!(messages[0]["content"][0], json!({"type": "text", "text": "What differs between these?"}));
            assert_eq!(messages[0]["content"][1], image);
            assert_eq!(messages[0]["content"][2]["source"]["media_type"], "image/gif");
            let result = &messages[2]["content"][0];
            assert_eq!(result["type"], "tool_result");
            assert_eq!(result["content"], json!([{"type": "text", "text": "the screen"}, image]));
        }
        Api::Gemini | Api::Bedrock => unreachable!("not in APIS: tests/gemini.rs and tests/bedrock.rs have their own"),
    }
}

fn output_schema() -> OutputSchema {
    OutputSchema::new(json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}))
        .unwrap()
}

fn final_only() -> ModelRequest {
    ModelRequest {
        instructions: None,
        messages: Conversation::from_messages(vec![Message::user("Which city?")]),
        tools: Arc::from(vec![output_schema().tool_spec().clone()]),
        cache_key: None,
    }
}

fn final_and_more() -> ModelRequest {
    ModelRequest { tools: Arc::from(vec![look_spec(), output_schema().tool_spec().clone()]), ..final_only() }
}

#[tokio::test]
async fn images_and_native_output_reach_each_adapter_and_pass_the_sdk_types() {
    let python = sdk_python();
    let out = std::env::temp_dir().join(format!("reins-media-contract-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    for api in APIS {
        std::fs::create_dir_all(out.join(dir(api))).unwrap();
        for stream in [false, true] {
            let mode = if stream { "stream" } else { "plain" };
            let body = capture(api, stream, &image_request()).await;
            assert_native(api, &body);
            std::fs::write(out.join(dir(api)).join(format!("images-{mode}.json")), body.to_string()).unwrap();

            let native = capture(api, stream, &final_only()).await;
            match api {
                Api::OpenAiChat => {
                    assert!(native.get("tools").is_none(), "{native}");
                    assert_eq!(native["response_format"]["type"], "json_schema");
                    assert_eq!(native["response_format"]["json_schema"]["name"], "final_answer");
                    assert_eq!(native["response_format"]["json_schema"]["schema"], *output_schema().schema());
                }
                Api::OpenAiResponses => {
                    assert!(native.get("tools").is_none(), "{native}");
                    assert_eq!(native["text"]["format"]["type"], "json_schema");
                    assert_eq!(native["text"]["format"]["schema"], *output_schema().schema());
                }
                // No native format here: the final-answer tool.
                Api::Anthropic => assert_eq!(native["tools"][0]["name"], "final_answer"),
                Api::Gemini | Api::Bedrock => {
                    unreachable!("not in APIS: tests/gemini.rs and tests/bedrock.rs have their own")
                }
            }
            std::fs::write(out.join(dir(api)).join(format!("native-output-{mode}.json")), native.to_string()).unwrap();

            // With another tool on offer, the schema never binds the turn: tools, no native format.
            let both = capture(api, stream, &final_and_more()).await;
            assert!(both.get("response_format").is_none() && both.get("text").is_none(), "{both}");
            let names: Vec<&str> = both["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().or_else(|| t["function"]["name"].as_str()).unwrap())
                .collect();
            assert_eq!(names, ["screenshot", "final_answer"]);
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let empty = out.join("no-fixtures");
    std::fs::create_dir_all(&empty).unwrap();
    let result = std::process::Command::new(&python)
        .arg(root.join("contract/check_contract.py"))
        .args(["--requests".as_ref(), out.as_os_str(), "--fixtures".as_ref(), empty.as_os_str()])
        .output()
        .expect("run the contract check");
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    let _ = std::fs::remove_dir_all(&out);
    assert!(result.status.success(), "the contract check failed:\n{stdout}\n{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok   request")).count(), 12, "{stdout}");
}

/// A run whose tool returns an image: the next request carries it in the API's form.
#[tokio::test]
async fn an_image_from_a_tool_result_reaches_the_model_through_a_run() {
    for api in APIS {
        let server =
            Server::start(vec![Reply::json(200, fixture(&format!("{}/tools.json", dir(api)))), text_reply(api, false)])
                .await;
        let tool = FnTool::new(
            "get_weather",
            "Weather.",
            json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}),
            |_, _| async { Ok(ToolOutput::Parts { text: "sunny".into(), images: vec![png()] }) },
        );
        let agent = Agent::builder(provider(api, &server, false))
            .registry(Registry::builder().tool(tool).build().unwrap())
            .build()
            .unwrap();
        let o = agent.run_with_images("Weather?", vec![gif()], CancellationToken::new()).await;
        assert_eq!(o.status, Status::Completed, "{api:?}: {:?}", o.error);
        assert_eq!(o.messages[0].images(), [gif()]);
        let requests = server.requests();
        let second = requests[1].json();
        let text = second.to_string();
        assert!(text.contains(PNG_1X1), "{api:?}: the tool's image reached the model: {text}");
        assert!(text.contains("data:image/gif") || text.contains("image/gif"), "{api:?}: the prompt's image too");
        match api {
            Api::OpenAiResponses => assert!(text.contains("\"input_image\"")),
            Api::OpenAiChat => {
                let last = second["messages"].as_array().unwrap().last().unwrap().clone();
                assert_eq!(last["role"], "user", "{api:?}: {second}");
                assert_eq!(last["content"].as_array().map(Vec::len), Some(4), "two results, each text + image");
            }
            Api::Anthropic => assert!(text.contains("\"tool_result\"") && text.contains("\"base64\"")),
            Api::Gemini | Api::Bedrock => {
                unreachable!("not in APIS: tests/gemini.rs and tests/bedrock.rs have their own")
            }
        }
    }
}
