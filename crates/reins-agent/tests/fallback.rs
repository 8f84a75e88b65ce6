//! A list of models in the agent file: parsing, errors naming the key, the cool-down key, and the cost
//! limit asking a price of every model of the list.

use std::path::Path;

use reins_agent::AgentDef;

fn parse(text: &str) -> Result<AgentDef, String> {
    AgentDef::from_toml(text, Path::new("/agents")).map_err(|e| e.to_string())
}

#[test]
fn a_list_of_models_is_the_model_and_its_fallbacks() {
    let def = parse(
        "model = [\"anthropic:claude-sonnet-4-5\", \"openai:gpt-4.1-mini\", \"script:t.json\"]\nfallback_cooldown = \"5s\"\n",
    )
    .unwrap();
    let m = def.model.as_ref().unwrap();
    assert_eq!(m.as_str(), "anthropic:claude-sonnet-4-5");
    let rest: Vec<&str> = m.fallbacks().iter().map(|f| f.as_str()).collect();
    assert_eq!(rest, ["openai:gpt-4.1-mini", "script:/agents/t.json"], "a script's path is resolved too");
    assert_eq!(def.fallback_cooldown.unwrap().0, std::time::Duration::from_secs(5));
    // It reads back as written: a list.
    let back: AgentDef = serde_json::from_value(serde_json::to_value(&def).unwrap()).unwrap();
    assert_eq!(back, def);
    assert!(serde_json::to_value(&def).unwrap()["model"].is_array());
    // A single string stays a single model.
    assert!(parse("model = \"openai:gpt-4.1-mini\"\n").unwrap().model.unwrap().fallbacks().is_empty());
}

#[test]
fn errors_in_the_list_name_the_key() {
    let e = parse("model = [\"openai:gpt-4.1-mini\", \"nope\"]\n").unwrap_err();
    assert!(e.starts_with("model"), "{e}");
    assert!(e.contains("expected PROVIDER:NAME"), "{e}");
    let e = parse("model = []\n").unwrap_err();
    assert!(e.starts_with("model") && e.contains("at least one model"), "{e}");
    let e = parse("model = [\"openai:gpt-4.1-mini\", 3]\n").unwrap_err();
    assert!(e.starts_with("model"), "{e}");
    let e = parse("model = \"openai:gpt-4.1-mini\"\nfallback_cooldown = \"soon\"\n").unwrap_err();
    assert!(e.starts_with("fallback_cooldown"), "{e}");
}

#[test]
fn under_a_cost_limit_every_model_of_the_list_needs_a_price() {
    // PATH stands in for an API key variable that is set (nothing is sent: nothing runs).
    let base = "[provider]\napi_key_env = \"PATH\"\n[limits]\nmax_cost_usd = 1.0\n";
    let build = |models: &str| {
        let def = parse(&format!("model = {models}\n{base}")).unwrap();
        def.parts_with(None).err().map(|e| e.to_string())
    };
    let e = build("[\"openai:gpt-4.1-mini\", \"openai:no-such-model-priced\"]").expect("refused");
    assert!(e.starts_with("model: the model \"openai:no-such-model-priced\" has no known price"), "{e}");
    assert_eq!(build("[\"openai:gpt-4.1-mini\", \"openai:gpt-4.1\"]"), None);
}

#[test]
fn bedrock_models_build_in_a_list_and_price_by_their_claude_name() {
    // PATH stands in for the Bedrock API key (a bearer); the base URL names the region.
    let base = "[provider]\napi_key_env = \"PATH\"\nbase_url = \"https://bedrock-runtime.eu-west-3.amazonaws.com\"\n\
                [limits]\nmax_cost_usd = 1.0\n";
    let build = |models: &str| {
        let def = parse(&format!("model = {models}\n{base}")).unwrap();
        def.parts_with(None).err().map(|e| e.to_string())
    };
    let claude = "[\"bedrock:eu.anthropic.claude-sonnet-4-5-20250929-v1:0\", \"bedrock:anthropic.claude-haiku-4-5-20251001-v1:0\"]";
    assert_eq!(build(claude), None);
    let e =
        build("[\"bedrock:eu.anthropic.claude-sonnet-4-5-20250929-v1:0\", \"bedrock:meta.llama3-70b-instruct-v1:0\"]")
            .expect("refused");
    assert!(e.contains("\"bedrock:meta.llama3-70b-instruct-v1:0\" has no known price"), "{e}");
}
