//! `build()`: a definition becomes a ready agent with its model, tools, limits, context budget and pricing,
//! and records itself in a store.

use std::path::Path;

use reins::Status;
use reins_agent::{AgentDef, BuildError, BuildOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn script(dir: &Path, turns: serde_json::Value) -> String {
    let path = dir.join("turns.json");
    std::fs::write(&path, turns.to_string()).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn a_toml_agent_with_workspace_tools_and_a_preset_runs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    std::fs::write(dir.path().join("repo/notes.txt"), "hello from the workspace\n").unwrap();
    script(
        dir.path(),
        json!([
            {"tool_calls": [{"id": "1", "name": "read_file", "arguments": {"path": "notes.txt"}},
                            {"id": "2", "name": "run_command", "arguments": {"command": "say"}},
                            {"id": "3", "name": "echo", "arguments": {"text": "hi"}}]},
            {"content": "done"}
        ]),
    );
    let text = r#"
        model = "script:turns.json"
        test_tools = true
        [limits]
        max_steps = 4
        tool_timeout = "20s"
        [context]
        max_context_chars = 100000
        max_tool_result_chars = 500
        [workspace]
        path = "repo"
        [commands]
        sandbox = "off"
        [[presets]]
        name = "say"
        program = "echo"
        args = ["said"]
    "#;
    let def = AgentDef::from_toml(text, dir.path()).unwrap();
    let agent = def.build().await.unwrap();
    let names: Vec<_> = agent.registry().specs().iter().map(|s| s.name.clone()).collect();
    for tool in ["echo", "fail", "read_file", "write_file", "edit_file", "list_dir", "search", "run_command"] {
        assert!(names.contains(&tool.to_owned()), "{tool} missing from {names:?}");
    }
    assert_eq!(agent.limits().max_steps, Some(4));
    assert_eq!(agent.limits().tool_timeout, Some(std::time::Duration::from_secs(20)));
    assert_eq!(agent.context().max_context, Some(100_000));
    assert_eq!(agent.context().max_tool_result_chars, Some(500));
    assert!(agent.pricing.is_none(), "a script has no price");
    let outcome = agent.run("look", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{outcome:?}");
    let results: Vec<_> = outcome
        .messages
        .iter()
        .filter_map(|m| match m {
            reins::Message::ToolResult(r) => Some((r.content.clone(), r.is_error)),
            _ => None,
        })
        .collect();
    assert!(results[0].0.contains("hello from the workspace") && !results[0].1, "{results:?}");
    assert!(results[1].0.contains("said") && !results[1].1, "{results:?}");
    assert_eq!(results[2], ("hi".to_owned(), false));
    agent.shutdown().await;
}

#[test]
fn a_known_model_gets_its_window_as_the_default_budget() {
    let def = AgentDef::from_toml(
        "model = \"openai:gpt-4.1-mini\"\n[provider]\nbase_url = \"http://127.0.0.1:9/v1\"\n",
        Path::new("/"),
    )
    .unwrap();
    assert_eq!(def.default_context_tokens(), Some((1_047_576 - 32_000) / 10 * 9));
    let context = def.build_context().unwrap();
    assert_eq!(context.max_context, Some((1_047_576 - 32_000) / 10 * 9));
    assert_eq!(context.counter.unit(), "tokens");
    // A real model of known window summarizes by default; the keys of [context] say otherwise.
    assert_eq!(context.strategy, reins::ContextStrategy::Summarize);
    assert_eq!(context.compact_at, 0.8);
    let mut dropping = def.clone();
    dropping.context.strategy = Some(reins::ContextStrategy::Drop);
    dropping.context.compact_at = reins_agent::Share::new(0.5);
    dropping.context.summary_prompt = Some("P".into());
    let c = dropping.build_context().unwrap();
    assert_eq!((c.strategy, c.compact_at, c.summary_prompt.as_deref()), (reins::ContextStrategy::Drop, 0.5, Some("P")));
    // The response cap is held back instead when set.
    let mut capped = def.clone();
    capped.provider.max_response_tokens = reins_agent::Positive::new(2000);
    assert_eq!(capped.default_context_tokens(), Some((1_047_576 - 2000) / 10 * 9));
    // A budget given wins; an unknown model or a script gets none.
    let mut given = def.clone();
    given.context.max_context_chars = reins_agent::Positive::new(500);
    assert_eq!(given.default_context_tokens(), None);
    assert_eq!(given.build_context().unwrap().counter.unit(), "characters");
    let unknown = AgentDef::new("openai-chat:my-local-model").unwrap();
    assert_eq!(unknown.default_context_tokens(), None);
    assert_eq!(unknown.build_context().unwrap().strategy, reins::ContextStrategy::Drop);
    // The model and its price (a local server needs no key).
    let (_, pricing) = def.build_model().unwrap();
    let pricing = pricing.unwrap();
    assert_eq!(pricing.model, "gpt-4.1-mini");
    assert!(pricing.price.is_some());
}

#[test]
fn definitions_that_cannot_be_built_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), json!([{"content": "x"}]));
    let mut def = AgentDef::new(&format!("script:{s}")).unwrap();
    def.provider.base_url = Some("http://127.0.0.1:9/v1".into());
    let e = def.build_model().err().unwrap().to_string();
    assert!(e.starts_with("provider.base_url: applies to openai:"), "{e}");

    let no_model = AgentDef::default();
    let e = no_model.build_model().err().unwrap().to_string();
    assert!(e.starts_with("no model"), "{e}");

    let presets = AgentDef::new(&format!("script:{s}")).unwrap().preset(reins_agent::Preset::new("t", "true", vec![]));
    let e = presets.build_tools().err().unwrap().to_string();
    assert!(e.contains("presets need a workspace"), "{e}");

    let bad_script = AgentDef::new(&format!("script:{}", dir.path().display())).unwrap();
    let e = bad_script.build_model().err().unwrap().to_string();
    assert!(e.contains("not a regular file"), "{e}");

    if std::env::var_os("ANTHROPIC_API_KEY").is_none() {
        let e = AgentDef::new("anthropic:claude-sonnet-4-5").unwrap().build_model().err().unwrap();
        assert!(matches!(&e, BuildError::MissingApiKey { env, .. } if env == "ANTHROPIC_API_KEY"), "{e}");
    }
    let file = dir.path().join("prompt.md");
    std::fs::write(&file, "Be careful.").unwrap();
    let def = AgentDef { instructions_file: Some(file.clone()), ..AgentDef::default() };
    assert_eq!(def.instructions_text().unwrap().as_deref(), Some("Be careful."));
    // The file's text is what a session records, so a resumed run sees the same instructions.
    let recorded = AgentDef::from_session_config(&def.session_config(Some("Be careful."))).unwrap().unwrap();
    assert_eq!((recorded.instructions.as_deref(), recorded.instructions_file), (Some("Be careful."), None));
    let def = AgentDef { instructions_file: Some(dir.path().to_path_buf()), ..AgentDef::default() };
    assert!(def.instructions_text().unwrap_err().to_string().starts_with("instructions_file: "));
}

#[tokio::test]
async fn a_built_agent_records_its_definition_in_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), json!([{"content": "hello"}]));
    let mut def = AgentDef::new(&format!("script:{s}")).unwrap().instructions("Say hello.");
    def.test_tools = Some(true);
    def.limits.max_tool_calls = Some(reins_agent::Count(3));
    def.provider = Default::default();
    let store = reins_store::Store::open(dir.path().join("s.db")).unwrap();
    let agent = def.build_with(BuildOptions { store: Some((store.clone(), None)) }).await.unwrap();
    assert_eq!(agent.instructions(), Some("Say hello."), "the instructions reach the agent");
    let outcome = agent.run("hi", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed);
    let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();
    let runs = session.runs().unwrap();
    let config = runs[0].start.config.clone().unwrap();
    let recorded = AgentDef::from_session_config(&config).unwrap().unwrap();
    assert_eq!(recorded, def);
    assert_eq!(session.summary.model.as_deref(), Some(format!("script:{s}").as_str()));
}

#[tokio::test]
async fn a_sub_agent_table_is_a_tool_whose_run_is_a_child_run_of_the_session() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    std::fs::write(dir.path().join("repo/notes.txt"), "the answer is 42\n").unwrap();
    std::fs::write(
        dir.path().join("parent.json"),
        json!([
            {"tool_calls": [{"id": "p1", "name": "reader", "arguments": {"task": "What do the notes say?"}}],
             "usage": {"input_tokens": 10, "output_tokens": 5}},
            {"content": "The notes say 42.", "usage": {"input_tokens": 20, "output_tokens": 5}}
        ])
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("reader.json"),
        json!([
            {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}}],
             "usage": {"input_tokens": 100, "output_tokens": 7}},
            {"content": "42", "usage": {"input_tokens": 200, "output_tokens": 3}}
        ])
        .to_string(),
    )
    .unwrap();
    let text = r#"
        model = "script:parent.json"
        test_tools = true
        [agents.reader]
        description = "Reads the notes."
        model = "script:reader.json"
        instructions = "Read, then answer in one word."
        [agents.reader.workspace]
        path = "repo"
        read_only = true
    "#;
    let def = AgentDef::from_toml(text, dir.path()).unwrap();
    let store = reins_store::Store::open(dir.path().join("s.db")).unwrap();
    let agent = def.build_with(BuildOptions { store: Some((store.clone(), None)) }).await.unwrap();
    // The parent sees the sub-agent as a tool (and its own test tools), never the sub-agent's tools.
    let names: Vec<&str> = agent.registry().specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["echo", "fail", "reader"]);
    let spec = agent.registry().specs().iter().find(|s| s.name == "reader").unwrap().clone();
    assert_eq!(spec.description, "Reads the notes.");
    assert_eq!(spec.input_schema["required"], json!(["task"]));
    // Its tools are read-only: it may run alongside other parallel-safe calls.
    assert!(agent.registry().get("reader").unwrap().parallel_safe());

    let outcome = agent.run("Ask the reader.", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.messages[2].content(), "42");
    assert_eq!(outcome.usage.input_tokens, 330);
    let reader = &outcome.agents["reader"];
    assert_eq!((reader.runs, reader.steps, reader.tool_calls), (1, 2, 1));

    // The session: the parent's transcript, and the reader's run as a child run linked to the parent's.
    let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();
    assert_eq!(session.messages().unwrap(), outcome.messages);
    let children = session.child_runs().unwrap();
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(child.run, 1);
    assert_eq!(child.start.agent, "reader");
    assert_eq!(child.start.parent_run_id, outcome.run_id);
    assert_eq!(child.start.instructions.as_deref().map(|i| i.ends_with("Read, then answer in one word.")), Some(true));
    assert_eq!(child.messages.len(), 4, "task, call, result, answer: {:#?}", child.messages);
    assert_eq!(child.messages[0].content(), "What do the notes say?");
    assert!(child.messages[2].content().contains("the answer is 42"));
    assert_eq!(child.responses.len(), 2);
    assert_eq!(child.end.as_ref().unwrap()["status"], "completed");
    // The session's totals hold the sub-agent's usage too; the run's recorded end its breakdown.
    assert_eq!(session.summary.input_tokens, 330);
    let end = session.runs().unwrap()[0].end.clone().unwrap();
    assert_eq!(end["agents"]["reader"]["steps"], 2);
    // The child's events are in the log, tagged.
    let tagged: Vec<_> = session.events().filter(|e| e["agent"] == "reader").collect();
    assert!(!tagged.is_empty());
    assert!(tagged.iter().all(|e| e["parent_run_id"] == outcome.run_id.as_str()));
    // The recorded definition holds the sub-agent, so a resumed session rebuilds it.
    let recorded =
        AgentDef::from_session_config(session.runs().unwrap()[0].start.config.as_ref().unwrap()).unwrap().unwrap();
    assert_eq!(recorded.agents["reader"].description.as_deref(), Some("Reads the notes."));
    // And the session resumes from the parent's transcript alone.
    let state = session.resume_state(agent.limits().clone(), agent.context(), Some("And then?")).unwrap();
    assert_eq!(state.transcript().len(), outcome.messages.len() + 1);
}

#[test]
fn a_sub_agent_that_cannot_be_built_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), json!([{"content": "x"}]));
    let text = format!("model = \"script:{s}\"\n[agents.helper]\nmodel = \"script:missing.json\"\n");
    let def = AgentDef::from_toml(&text, dir.path()).unwrap();
    let e = def.parts_with(None).unwrap_err().to_string();
    assert!(e.starts_with("agents.helper: cannot read script file"), "{e}");
    // A sub-agent named like one of the parent's tools is refused.
    let text = format!("model = \"script:{s}\"\ntest_tools = true\n[agents.echo]\n");
    let e = AgentDef::from_toml(&text, dir.path()).unwrap().parts_with(None).unwrap_err().to_string();
    assert!(e.starts_with("agents.echo: the agent already has a tool named \"echo\""), "{e}");
}

/// Under a cost limit every model of the run needs a price: a sub-agent's own model and a summary model's are refused before anything runs, each
/// named by its key; priced ones build; a sub-agent's own limit asks the same of its models.
#[test]
fn every_model_of_a_run_under_a_cost_limit_needs_a_price() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), json!([{"content": "x"}]));
    let priced = "[provider]\nprice = { input_per_mtok = 1.0, output_per_mtok = 2.0 }\n";
    let err = |text: &str| AgentDef::from_toml(text, dir.path()).unwrap().parts_with(None).err().map(|e| e.to_string());
    let root = format!("model = \"script:{s}\"\n{priced}[limits]\nmax_cost_usd = 1.0\n");

    let child = format!("{root}[agents.helper]\nmodel = \"script:{s}\"\n");
    let e = err(&child).expect("an unpriced sub-agent is refused");
    assert!(e.starts_with("agents.helper.model: the model \"script:"), "{e}");
    assert!(e.contains("has no known price") && e.contains("max_cost_usd $1"), "{e}");
    assert_eq!(
        err(&format!("{child}[agents.helper.provider]\nprice = {{ input_per_mtok = 1.0, output_per_mtok = 2.0 }}\n")),
        None
    );

    // A sub-agent that inherits the parent's model inherits its price.
    assert_eq!(err(&format!("{root}[agents.helper]\ninstructions = \"help\"\n")), None);

    let compact = format!(
        "model = \"script:{s}\"\n{priced}[limits]\nmax_cost_usd = 1.0\n[context]\ncompact_model = \"script:{s}\"\n"
    );
    let e = err(&compact).expect("an unpriced summary model is refused");
    assert!(e.starts_with("context.compact_model: the model \"script:"), "{e}");

    // Without a limit nothing needs a price; a sub-agent's own limit asks it of the sub-agent's models.
    assert_eq!(err(&format!("model = \"script:{s}\"\n[agents.helper]\nmodel = \"script:{s}\"\n")), None);
    let own = format!(
        "model = \"script:{s}\"\n[agents.helper]\nmodel = \"script:{s}\"\n[agents.helper.limits]\nmax_cost_usd = 0.5\n"
    );
    assert!(err(&own).expect("refused").starts_with("agents.helper.model:"));
}

#[test]
fn a_session_records_the_spec_as_written_and_what_it_resolved_to() {
    let mut def = AgentDef::new("groq:llama-3.3-70b-versatile").unwrap();
    let config = def.session_config(None);
    assert_eq!(config["model"], "groq:llama-3.3-70b-versatile");
    assert_eq!(
        config["model_resolved"],
        serde_json::json!({"provider": "groq", "api": "openai-chat", "base_url": "https://api.groq.com/openai/v1",
                           "key_env": "GROQ_API_KEY"})
    );
    def.provider.base_url = Some("http://user:pw@127.0.0.1:9/openai/v1".into());
    def.provider.api_key_env = Some("MY_GATEWAY_KEY".into());
    let config = def.session_config(None);
    assert_eq!(config["model_resolved"]["key_env"], "MY_GATEWAY_KEY");
    assert!(!config["model_resolved"]["base_url"].as_str().unwrap().contains("pw"), "{config}");
    // Resumed, the spec is rebuilt as written.
    let back = AgentDef::from_session_config(&config).unwrap().unwrap();
    assert_eq!(back.model.unwrap().as_str(), "groq:llama-3.3-70b-versatile");
    assert_eq!(back.provider.api_key_env.as_deref(), Some("MY_GATEWAY_KEY"));
    assert!(AgentDef::new("script:x.json").unwrap().session_config(None)["model_resolved"].is_null());
}
