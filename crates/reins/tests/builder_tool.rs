//! `AgentBuilder::tool` (issue 24, item 6): one tool added beside a registry is offered and run; a name taken
//! twice is refused at build; the prelude is enough for a whole program.

use reins::prelude::*;

fn echo(name: &str) -> FnTool {
    FnTool::new(
        name,
        "Returns its text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        |args, _| async move { Ok(ToolOutput::Json(args["text"].clone())) },
    )
}

#[tokio::test]
async fn a_tool_added_beside_a_registry_is_offered_and_runs() {
    let model = ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("1", "shout", json!({"text": "hi"}))]),
        ModelResponse::text("done"),
    ]);
    let registry = Registry::builder().tool(echo("echo")).build().unwrap();
    let agent = Agent::builder(model).registry(registry).tool(echo("shout")).build().unwrap();
    let names: Vec<_> = agent.registry().specs().iter().map(|s| s.name.clone()).collect();
    assert_eq!(names, ["echo", "shout"]);
    let outcome = agent.run("shout hi", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed);
    assert_eq!(outcome.messages[2], Message::tool_result("1", "hi", false));
}

#[test]
fn a_name_taken_twice_is_refused_at_build() {
    let model = ScriptedModel::new(vec![ModelResponse::text("done")]);
    let registry = Registry::builder().tool(echo("echo")).build().unwrap();
    let e = Agent::builder(model).registry(registry).tool(echo("echo")).build().err().unwrap();
    assert!(e.to_string().contains("duplicate tool name \"echo\""), "{e}");
}
