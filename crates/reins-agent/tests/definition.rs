//! The agent definition: every key parses and round-trips, unknown keys and bad values name their path,
//! layers override with provenance, secrets are masked, paths are relative to their file.

use std::path::{Path, PathBuf};

use reins_agent::{AgentDef, DefError, Layer, Origin, REDACTED, UserConfig, resolve};

fn every_key_text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/every_key.toml")).unwrap()
}

fn every_key() -> AgentDef {
    AgentDef::from_toml(&every_key_text(), Path::new("/agents")).unwrap()
}

fn err(text: &str) -> DefError {
    AgentDef::from_toml(text, Path::new("/agents")).unwrap_err()
}

#[test]
fn every_key_parses_and_round_trips_through_toml_and_json() {
    let def = every_key();
    // Every table is there, and the paths of the file are relative to it.
    assert_eq!(def.workspace.path.as_deref(), Some(Path::new("/agents/repo")));
    assert_eq!(def.mcp["fs"].cwd.as_deref(), Some(Path::new("/agents/srv")));
    assert_eq!(def.presets[1].cwd.as_deref(), Some("src"), "a preset's cwd is workspace-relative");
    assert_eq!(def.limits.max_steps.unwrap().get(), 20);
    assert_eq!(def.provider.temperature.unwrap().get(), 0.5);
    assert_eq!(def.provider.reasoning_effort, Some(reins_providers::ReasoningEffort::High));
    assert_eq!(def.provider.thinking_budget.unwrap().get(), 4096);
    assert_eq!(def.commands.limits.unwrap().cpu_seconds, Some(60));
    assert_eq!(def.presets.len(), 2);
    assert!(def.mcp["web"].url.is_some());
    assert_eq!(def.context.strategy, Some(reins::ContextStrategy::Summarize));
    assert_eq!(def.context.compact_at.unwrap().get(), 0.7);
    assert_eq!(def.context.compact_model.as_ref().unwrap().as_str(), "script:/agents/summaries.json");
    assert_eq!(def.context.summary_prompt.as_deref(), Some("Summarize briefly."));
    assert_eq!(
        def.output_schema,
        Some(reins_agent::OutputSchemaDef::File(PathBuf::from("/agents/schema.json"))),
        "relative to the file"
    );

    assert_eq!(def.approve, Some(reins_agent::ApproveMode::Writes));
    assert_eq!(def.trace_content, Some(true));
    assert_eq!(def.hooks.len(), 2);
    assert_eq!(
        def.hooks[0].command,
        vec!["/agents/hooks/check.sh".to_owned(), "--strict".to_owned()],
        "relative to the file"
    );
    assert_eq!(def.hooks[0].pattern.as_deref(), Some("*_file"));
    assert_eq!(def.hooks[1].command, vec!["true".to_owned()], "a bare program name is looked up in PATH");
    let toml_text = def.to_toml().unwrap();
    let again = AgentDef::from_toml(&toml_text, Path::new("/elsewhere")).unwrap();
    assert_eq!(again, def, "TOML round trip:\n{toml_text}");
    let json = def.to_json();
    assert_eq!(AgentDef::from_json(&json).unwrap(), def, "JSON round trip");
    // No key was dropped on the way: the JSON form has every key of the file.
    let source: toml::Table = toml::from_str(&every_key_text()).unwrap();
    for (k, v) in &source {
        assert!(json.get(k).is_some(), "{k} lost");
        if let toml::Value::Table(t) = v {
            for sub in t.keys() {
                assert!(json[k].get(sub).is_some(), "{k}.{sub} lost");
            }
        }
    }
}

#[test]
fn unknown_keys_name_their_path() {
    for (text, path) in [
        ("bogus = 1\n", "bogus"),
        ("[limits]\nmax_step = 3\n", "limits.max_step"),
        ("[provider]\nsystem = \"x\"\n", "provider.system"),
        ("[context]\nmax_context = 3\n", "context.max_context"),
        ("[workspace]\nroot = \".\"\n", "workspace.root"),
        ("[commands]\ntimout = \"1s\"\n", "commands.timout"),
        ("[commands.limits]\ncpu = 1\n", "commands.limits.cpu"),
        ("[[presets]]\nname = \"x\"\nprogram = \"y\"\nbogus = 1\n", "presets[0].bogus"),
        ("[mcp.fs]\ncommand = \"x\"\nargz = []\n", "mcp.fs.argz"),
    ] {
        let e = err(text);
        assert_eq!(e.path.as_deref(), Some(path), "{text:?}: {e}");
        assert!(e.message.starts_with("unknown key"), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("{path}: unknown key")), "{e}");
    }
}

#[test]
fn bad_values_name_their_path_and_what_was_expected() {
    for (text, path, expected) in [
        ("[limits]\nmax_steps = 0\n", "limits.max_steps", "expected a positive integer"),
        ("[limits]\nmax_steps = -3\n", "limits.max_steps", "expected a positive integer"),
        ("[limits]\nmax_steps = \"ten\"\n", "limits.max_steps", "expected a positive integer"),
        ("[limits]\nmax_tool_calls = -1\n", "limits.max_tool_calls", "expected a non-negative integer"),
        ("[limits]\ntimeout = \"soon\"\n", "limits.timeout", "invalid duration \"soon\""),
        ("[limits]\ntimeout = \"0s\"\n", "limits.timeout", "invalid duration \"0s\""),
        ("[limits]\ntimeout = \"1ns\"\n", "limits.timeout", "smallest unit is ms"),
        ("[commands.limits]\nopen_files = 0\n", "commands", "limits.open_files must be at least 1"),
        ("[[presets]]\nname = \"x\"\nprogram = \"y\"\nlimits = { cpu_seconds = 0 }\n", "presets[0]", "cpu_seconds"),
        ("[limits]\ntool_timeout = 30\n", "limits.tool_timeout", "expected a duration"),
        ("model = \"gpt-4o\"\n", "model", "expected PROVIDER:NAME"),
        ("model = \"mystery:x\"\n", "model", "unknown provider"),
        ("[provider]\ntemperature = 3.5\n", "provider.temperature", "expected a number from 0 to 2"),
        ("[provider]\ntemperature = nan\n", "provider.temperature", "expected a number from 0 to 2"),
        ("[provider]\ntool_choice = \"sometimes\"\n", "provider.tool_choice", "expected \"auto\""),
        (
            "[provider]\nreasoning_effort = \"max\"\n",
            "provider.reasoning_effort",
            "expected \"low\", \"medium\" or \"high\"",
        ),
        ("[provider]\nreasoning_effort = 3\n", "provider.reasoning_effort", "\"low\", \"medium\" or \"high\""),
        ("[provider]\nthinking_budget = 0\n", "provider.thinking_budget", "expected a positive integer"),
        ("[provider]\nthinking_budget = 1000\n", "provider.thinking_budget", "at least 1024"),
        ("[provider]\nthinking_budget = 5000000000\n", "provider.thinking_budget", "at most"),
        ("[provider]\nbase_url = \"ftp://x\"\n", "provider.base_url", "http://"),
        ("[provider]\nmax_response_tokens = 5000000000\n", "provider.max_response_tokens", "at most"),
        ("[context]\nmax_tool_result_chars = 0\n", "context.max_tool_result_chars", "positive"),
        ("[context]\ncompact_at = 0\n", "context.compact_at", "more than 0 and at most 1"),
        ("[context]\ncompact_at = 1.5\n", "context.compact_at", "more than 0 and at most 1"),
        ("[context]\nstrategy = \"forget\"\n", "context.strategy", "unknown variant"),
        ("[context]\ncompact_model = \"gpt\"\n", "context.compact_model", "expected PROVIDER:NAME"),
        ("[context]\nmax_context_chars = 5\nmax_context_tokens = 5\n", "context.max_context_tokens", "not both"),
        ("instructions = \"a\"\ninstructions_file = \"b\"\n", "instructions_file", "not both"),
        ("test_tools = \"yes\"\n", "test_tools", "boolean"),
        ("trace_content = 1\n", "trace_content", "boolean"),
        ("[commands]\nsandbox = \"sometimes\"\n", "commands.sandbox", "unknown variant"),
        ("[[presets]]\nname = \"x\"\nprogram = \"y\"\ntimeout = \"soon\"\n", "presets[0].timeout", "duration"),
        (
            "[[presets]]\nname = \"x\"\nprogram = \"y\"\n[[presets]]\nname = \"x\"\nprogram = \"z\"\n",
            "presets[1].name",
            "duplicate",
        ),
        ("[mcp.fs]\nargs = [\"x\"]\n", "mcp.fs", "needs `command`"),
        ("[mcp.fs]\ncommand = \"x\"\nurl = \"http://h/\"\n", "mcp.fs", "not both"),
        ("[mcp.\"bad name\"]\ncommand = \"x\"\n", "mcp.bad name", "invalid MCP server name"),
        ("[mcp.web]\nurl = \"http://h/mcp\"\ncwd = \".\"\n", "mcp.web", "for a `command`"),
        ("[mcp.web]\nurl = \"http://h/mcp\"\nargs = [\"x\"]\n", "mcp.web", "for a `command`"),
        ("[mcp.fs]\ncommand = \"x\"\nheaders = { A = \"b\" }\n", "mcp.fs", "for an HTTP server"),
        ("[mcp.fs]\ncommand = \"x\"\ncall_timeout = \"0s\"\n", "mcp.fs.call_timeout", "invalid duration"),
        ("[mcp.web]\nurl = \"http://h/mcp\"\nprotocol = \"2025-13-01\"\n", "mcp.web", "unknown protocol revision"),
        ("limits = 3\n", "limits", ""),
    ] {
        let e = err(text);
        assert_eq!(e.path.as_deref(), Some(path), "{text:?}: {e}");
        assert!(e.message.contains(expected), "{text:?}: {e}");
        assert!(!e.message.contains('\n'), "one line: {e:?}");
    }
    // The example of the issue, word for word.
    assert_eq!(err("[limits]\nmax_steps = 0\n").to_string(), "limits.max_steps: expected a positive integer, not 0");
    // Syntax errors give the line and column.
    let e = err("model = \"script:x\"\n[limits\n");
    assert!(e.path.is_none() && e.message.contains("line 2"), "{e}");
}

#[test]
fn files_are_read_bounded_and_regular_only() {
    let dir = tempfile::tempdir().unwrap();
    let e = reins_agent::agent_file(dir.path()).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let e = reins_agent::agent_file(Path::new("/dev/zero")).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let e = reins_agent::agent_file(&fifo).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "a FIFO is refused without blocking: {e}");
    let big = dir.path().join("big.toml");
    std::fs::write(&big, "# x\n".repeat(300_000)).unwrap();
    let e = reins_agent::agent_file(&big).unwrap_err();
    assert!(e.to_string().contains("larger than 1 MiB"), "{e}");
    // A good file: its relative paths are relative to it, wherever the process runs.
    let file = dir.path().join("a.toml");
    std::fs::write(&file, "model = \"script:turns.json\"\ninstructions_file = \"prompt.md\"\n").unwrap();
    let def = reins_agent::agent_file(&file).unwrap();
    assert_eq!(def.model.unwrap().as_str(), format!("script:{}", dir.path().join("turns.json").display()));
    assert_eq!(def.instructions_file.unwrap(), dir.path().join("prompt.md"));
    let e = reins_agent::agent_file(&dir.path().join("missing.toml")).unwrap_err();
    assert!(e.to_string().starts_with("cannot read config ") && e.to_string().contains("missing.toml"), "{e}");
    std::fs::write(&file, "[limits]\nmax_steps = 0\n").unwrap();
    let e = reins_agent::agent_file(&file).unwrap_err().to_string();
    assert_eq!(e, format!("invalid config {}: limits.max_steps: expected a positive integer, not 0", file.display()));
}

fn layer(origin: Origin, text: &str) -> Layer {
    Layer::new(origin, AgentDef::from_toml(text, Path::new("/l")).unwrap())
}

#[test]
fn layers_override_key_by_key_and_know_where_each_value_came_from() {
    let user = Origin::UserConfig { path: PathBuf::from("/u/config.toml") };
    let file = Origin::AgentFile { path: PathBuf::from("/a/agent.toml") };
    let resolved = resolve(&[
        layer(
            user.clone(),
            "model = \"openai:gpt-4.1-mini\"\ninstructions = \"user\"\n[limits]\nmax_steps = 5\ntimeout = \"1m\"\n\
             [context]\nmax_context_chars = 100\n[[presets]]\nname = \"a\"\nprogram = \"x\"\n\
             [mcp.fs]\ncommand = \"x\"\nargs = [\"1\"]\ncall_timeout = \"9s\"\n",
        ),
        layer(
            file.clone(),
            "instructions_file = \"p.md\"\n[limits]\nmax_steps = 7\n[context]\nmax_context_tokens = 200\n\
             [[presets]]\nname = \"a\"\nprogram = \"y\"\n[[presets]]\nname = \"b\"\nprogram = \"z\"\n\
             [mcp.fs]\ncommand = \"other\"\n",
        ),
        layer(Origin::Flag, "[limits]\ntimeout = \"2m\"\n"),
    ])
    .unwrap();
    let d = &resolved.def;
    assert_eq!(d.limits.max_steps.unwrap().get(), 7);
    assert_eq!(d.limits.timeout.unwrap().to_string(), "2m");
    assert_eq!(d.model.as_ref().unwrap().as_str(), "openai:gpt-4.1-mini");
    // Keys that exclude each other: the higher layer's wins, the other is gone.
    assert_eq!((d.instructions.as_deref(), d.instructions_file.as_deref()), (None, Some(Path::new("/l/p.md"))));
    assert_eq!((d.context.max_context_chars, d.context.max_context_tokens.map(|n| n.get())), (None, Some(200)));
    // Presets and MCP servers: replaced whole by name, others kept in order.
    let presets: Vec<_> = d.presets.iter().map(|p| (p.name.as_str(), p.program.as_str())).collect();
    assert_eq!(presets, [("a", "y"), ("b", "z")]);
    assert_eq!(d.mcp["fs"].command.as_deref(), Some("other"));
    assert!(d.mcp["fs"].args.is_empty() && d.mcp["fs"].call_timeout.is_none(), "the table is replaced whole");

    let o = |k: &str| resolved.origin(k).cloned();
    assert_eq!(o("limits.max_steps"), Some(file.clone()));
    assert_eq!(o("limits.timeout"), Some(Origin::Flag));
    assert_eq!(o("model"), Some(user.clone()));
    assert_eq!(o("instructions"), None);
    assert_eq!(o("instructions_file"), Some(file.clone()));
    assert_eq!(o("context.max_context_chars"), None);
    assert_eq!(o("context.max_tool_result_chars"), Some(Origin::Default));
    assert_eq!(o("test_tools"), Some(Origin::Default));
    assert_eq!(o("presets.a"), Some(file.clone()));
    assert_eq!(o("mcp.fs"), Some(file.clone()));
    assert_eq!(o("mcp.fs.command"), Some(file.clone()));
    // Every entry shown has an origin; secrets are masked.
    let entries = resolved.entries();
    assert!(entries.iter().any(|e| e.key == "limits.max_steps" && e.value == 7 && e.origin == file));
    assert!(entries.iter().any(|e| e.key == "presets.b" && e.value["program"] == "z"));
}

#[test]
fn the_user_config_gives_defaults_and_profiles() {
    let text = "[limits]\nmax_steps = 9\n[workspace]\npath = \"ws\"\n\
                [profiles.fast]\nmodel = \"openai:gpt-4.1-nano\"\n[profiles.fast.limits]\nmax_steps = 3\n\
                [profiles.careful.limits]\nmax_tool_calls = 0\n";
    let path = Path::new("/home/u/.config/reins/config.toml");
    let user = UserConfig::parse(text, path).unwrap();
    assert_eq!(user.defaults.workspace.path.as_deref(), Some(Path::new("/home/u/.config/reins/ws")));
    let layers = user.layers(Some("fast")).unwrap();
    let agent = Layer::new(
        Origin::AgentFile { path: "/a.toml".into() },
        AgentDef::from_toml("[limits]\ntimeout = \"1m\"\n", Path::new("/")).unwrap(),
    );
    let resolved = resolve(&[layers, vec![agent]].concat()).unwrap();
    assert_eq!(resolved.def.limits.max_steps.unwrap().get(), 3);
    assert_eq!(resolved.def.model.as_ref().unwrap().as_str(), "openai:gpt-4.1-nano");
    assert_eq!(
        resolved.origin("limits.max_steps"),
        Some(&Origin::Profile { name: "fast".into(), path: path.to_path_buf() })
    );
    assert_eq!(resolved.origin("workspace.path"), Some(&Origin::UserConfig { path: path.to_path_buf() }));
    // Without a profile, the defaults only; an unknown profile names the known ones.
    let plain = resolve(&user.layers(None).unwrap()).unwrap();
    assert_eq!(plain.def.limits.max_steps.unwrap().get(), 9);
    let e = user.layers(Some("quick")).unwrap_err().to_string();
    assert!(e.contains("no profile \"quick\"") && e.contains("careful, fast"), "{e}");
    // Bad keys in a profile name the profile's path.
    let e = UserConfig::parse("[profiles.fast.limits]\nmax_steps = 0\n", path).unwrap_err();
    assert_eq!(e.path.as_deref(), Some("profiles.fast.limits.max_steps"), "{e}");
    let e = UserConfig::parse("[profiles.fast]\nbogus = 1\n", path).unwrap_err();
    assert_eq!(e.path.as_deref(), Some("profiles.fast.bogus"), "{e}");
    let e = UserConfig::parse("[limits]\nmax_stepz = 1\n", path).unwrap_err();
    assert_eq!(e.path.as_deref(), Some("limits.max_stepz"), "{e}");
    // A missing user config is an empty one.
    let none = UserConfig::read(Path::new("/nonexistent/reins/config.toml")).unwrap();
    assert_eq!(none.defaults, AgentDef::default());
}

#[test]
fn secrets_are_masked_and_a_redacted_definition_does_not_build() {
    let mut def = every_key();
    // Credentials in URLs: the provider's base URL and an MCP server's.
    def.provider.base_url = Some("http://me:pw-secret-1@127.0.0.1:9/v1".into());
    def.mcp.get_mut("web").unwrap().url = Some("https://tok:url-secret-2@mcp.example.test/mcp".into());
    let secrets = ["secret-team-token", "secret-bearer", "ghp_secret", "pw-secret-1", "url-secret-2"];
    let red = def.redacted();
    assert_eq!(red.provider.headers["X-Team"], REDACTED);
    assert_eq!(red.mcp["web"].headers["Authorization"], REDACTED);
    assert_eq!(red.mcp["fs"].env["GITHUB_TOKEN"], REDACTED);
    assert_eq!(red.mcp["fs"].env["DEBUG"], REDACTED, "every env value is masked, whatever its name");
    assert_eq!(red.provider.base_url.as_deref(), Some("http://<redacted>@127.0.0.1:9/v1"));
    assert_eq!(red.mcp["web"].url.as_deref(), Some("https://<redacted>@mcp.example.test/mcp"));
    assert_eq!(red.provider.extra_body, def.provider.extra_body, "recorded: a resumed run sends the same body");
    let text = serde_json::to_string(&red.to_json()).unwrap();
    for secret in secrets {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    let config = def.session_config(Some("Be brief."));
    let recorded = serde_json::to_string(&config).unwrap();
    for secret in secrets {
        assert!(!recorded.contains(secret), "{secret} recorded: {recorded}");
    }
    // Shown (`config show`), the extra body's values are masked too.
    let shown = def.shown();
    assert!(shown.provider.extra_body.as_ref().unwrap().values().all(|v| v == REDACTED), "{shown:?}");
    let mut keys = red.redacted_keys();
    keys.sort();
    assert_eq!(
        keys,
        [
            "mcp.fs.env.DEBUG",
            "mcp.fs.env.GITHUB_TOKEN",
            "mcp.web.headers.Authorization",
            "mcp.web.url",
            "provider.base_url",
            "provider.headers.X-Team"
        ]
    );
    let e = red.check_secrets().unwrap_err().to_string();
    assert!(e.starts_with("provider.headers.X-Team: this secret was not recorded"), "{e}");
}

#[test]
fn a_recorded_definition_reads_back_and_old_sessions_still_give_one() {
    let def = every_key();
    let config = def.session_config(Some("Be brief."));
    let back = AgentDef::from_session_config(&config).unwrap().unwrap();
    assert_eq!(back, AgentDef { instructions: Some("Be brief.".into()), ..def.redacted() });
    // A session recorded before definitions were: its flags.
    let legacy = serde_json::json!({"model": "script:/x/t.json", "test_tools": true, "workspace": "/w",
        "max_tool_result_chars": 100, "max_context_chars": null, "max_context_tokens": 500});
    let old = AgentDef::from_session_config(&legacy).unwrap().unwrap();
    assert_eq!(old.model.unwrap().as_str(), "script:/x/t.json");
    assert_eq!(old.test_tools, Some(true));
    assert_eq!(old.workspace.path.as_deref(), Some(Path::new("/w")));
    assert_eq!(old.context.max_tool_result_chars.unwrap().get(), 100);
    assert_eq!(old.context.max_context_tokens.unwrap().get(), 500);
    assert_eq!(AgentDef::from_session_config(&serde_json::Value::Null).unwrap(), None);
}

#[test]
fn command_line_specs_become_tables() {
    let (name, server) = reins_agent::McpServerDef::from_spec("fs=node server.js '/tmp/my dir'").unwrap();
    assert_eq!(name, "fs");
    assert_eq!(server.command.as_deref(), Some("node"));
    assert_eq!(server.args, ["server.js", "/tmp/my dir"]);
    let (_, web) = reins_agent::McpServerDef::from_spec("web=http://127.0.0.1:9/mcp").unwrap();
    assert_eq!(web.url.as_deref(), Some("http://127.0.0.1:9/mcp"));
    assert!(reins_agent::McpServerDef::from_spec("bad__name=x").is_err());
    let p = reins_agent::parse_preset("test=cargo test -- 'a b' \"c;d\"").unwrap();
    assert_eq!((p.name.as_str(), p.program.as_str()), ("test", "cargo"));
    assert_eq!(p.args, ["test", "--", "a b", "c;d"]);
    for bad in ["nocommand", "x=", "x=echo 'open"] {
        assert!(reins_agent::parse_preset(bad).is_err(), "{bad}");
    }
}

#[test]
fn output_schema_is_a_file_or_an_inline_table_and_a_bad_one_names_its_key() {
    let def = AgentDef::from_toml("[output_schema]\ntype = \"object\"\nrequired = [\"a\"]\n", Path::new("/a")).unwrap();
    let Some(reins_agent::OutputSchemaDef::Inline(v)) = &def.output_schema else { panic!("{def:?}") };
    assert_eq!(v["required"][0], "a");
    assert_eq!(AgentDef::from_toml(&def.to_toml().unwrap(), Path::new("/b")).unwrap(), def);
    assert_eq!(AgentDef::from_json(&def.to_json()).unwrap(), def);
    for (text, says) in [
        ("output_schema = 3\n", "expected the path of a JSON Schema file or an inline schema table"),
        ("[output_schema]\ntype = 5\n", "invalid output schema"),
        ("output_schema = \"\"\n", "empty path"),
    ] {
        let e = err(text);
        assert_eq!(e.path.as_deref(), Some("output_schema"), "{text}: {e}");
        assert!(e.message.contains(says), "{text}: {e}");
    }
    // A layer's schema replaces a lower layer's whole (never merged key by key).
    let lower =
        AgentDef::from_toml("[output_schema]\ntype = \"object\"\nrequired = [\"a\"]\n", Path::new("/")).unwrap();
    let upper = AgentDef::from_toml("[output_schema]\ntype = \"object\"\n", Path::new("/")).unwrap();
    let r =
        resolve(&[Layer::new(Origin::AgentFile { path: "a".into() }, lower), Layer::new(Origin::Flag, upper.clone())])
            .unwrap();
    assert_eq!(r.def.output_schema, upper.output_schema);
}

#[test]
fn sub_agents_parse_inherit_and_refuse_what_they_cannot_hold() {
    let def = every_key();
    let reader = &def.agents["reader"];
    // Its paths are relative to the file, like the parent's.
    assert_eq!(reader.workspace.path.as_deref(), Some(Path::new("/agents/repo")));
    assert_eq!(reader.model.as_ref().unwrap().as_str(), "script:/agents/reader.json");
    assert_eq!(reader.description.as_deref(), Some("Reads files and reports what they say."));
    // It names its model: it gets its own (default) [provider], not the parent's.
    let built = def.sub_agent("reader").unwrap();
    assert_eq!(built.provider, Default::default());
    assert_eq!(built.limits.max_steps.unwrap().get(), 5);
    assert!(built.test_tools.is_none(), "tools are never inherited");
    assert!(def.sub_agent("nobody").is_none());

    // Without a model it inherits the parent's model and [provider].
    let def = AgentDef::from_toml(
        r#"
        model = "openai:gpt-4.1-mini"
        [provider]
        base_url = "http://127.0.0.1:9/v1"
        [agents.helper]
        instructions = "Help."
        "#,
        Path::new("/a"),
    )
    .unwrap();
    let helper = def.sub_agent("helper").unwrap();
    assert_eq!(helper.model, def.model);
    assert_eq!(helper.provider, def.provider);
    assert_eq!(helper.instructions.as_deref(), Some("Help."));

    // One level of nesting; names that are tool names; MCP servers only at the top; key paths in errors.
    let nested = err("[agents.a]\n[agents.a.agents.b]\nmodel = \"script:x.json\"\n");
    assert_eq!(nested.path.as_deref(), Some("agents.a.agents"), "{nested}");
    assert!(nested.message.contains("one level"), "{nested}");
    let named = err("[agents.\"2nd\"]\nmodel = \"script:x.json\"\n");
    assert_eq!(named.path.as_deref(), Some("agents.2nd"), "{named}");
    let mcp = err("[agents.a.mcp.fs]\ncommand = \"npx\"\n");
    assert_eq!(mcp.path.as_deref(), Some("agents.a.mcp"), "{mcp}");
    let bad = err("[agents.a.limits]\nmax_steps = 0\n");
    assert_eq!(bad.path.as_deref(), Some("agents.a.limits.max_steps"), "{bad}");
    let inner = err("[agents.a]\ninstructions = \"x\"\ninstructions_file = \"y\"\n");
    assert_eq!(inner.path.as_deref(), Some("agents.a.instructions_file"), "{inner}");
    let unknown = err("[agents.a]\nmodle = \"x\"\n");
    assert_eq!(unknown.path.as_deref(), Some("agents.a.modle"), "{unknown}");

    // A sub-agent's secrets are masked and named by their path.
    let def = AgentDef::from_toml(
        "[agents.a]\nmodel = \"openai:gpt-4.1\"\n[agents.a.provider]\nheaders = { X-Key = \"s3cret\" }\n",
        Path::new("/a"),
    )
    .unwrap();
    let shown = def.redacted();
    assert_eq!(shown.agents["a"].provider.headers["X-Key"], REDACTED);
    assert_eq!(shown.redacted_keys(), vec!["agents.a.provider.headers.X-Key".to_owned()]);
}

#[test]
fn a_later_layer_replaces_a_sub_agent_whole() {
    let file = layer(
        Origin::AgentFile { path: PathBuf::from("/a/agent.toml") },
        "[agents.a]\ninstructions = \"one\"\n[agents.a.limits]\nmax_steps = 3\n[agents.b]\ninstructions = \"two\"\n",
    );
    let flags = layer(Origin::Flag, "[agents.a]\ninstructions = \"three\"\n");
    let r = resolve(&[file, flags]).unwrap();
    assert_eq!(r.def.agents["a"].instructions.as_deref(), Some("three"));
    assert!(r.def.agents["a"].limits.max_steps.is_none(), "replaced whole, not merged");
    assert_eq!(r.def.agents["b"].instructions.as_deref(), Some("two"));
    assert_eq!(r.origins["agents.a"], Origin::Flag);
}

#[test]
fn an_mcp_tables_protocol_and_elicitation_defaults_reach_the_server_configuration() {
    let configs = every_key().mcp_configs().unwrap();
    let web = configs.iter().find(|c| c.name == "web").unwrap();
    assert_eq!(web.protocol.as_deref(), Some("2025-11-25"));
    assert!(web.elicitation_defaults);
    let fs = configs.iter().find(|c| c.name == "fs").unwrap();
    assert_eq!((fs.protocol.as_deref(), fs.elicitation_defaults), (None, false), "chosen per server, declined");
}
