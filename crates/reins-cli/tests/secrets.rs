//! A secret Reins knows never leaves in clear, and what Reins writes is private to its user: a server that
//! echoes the key and a header value back, credentials in a base URL, MCP `env` values and the environment an
//! MCP server gets, `config show`, and the modes of the store and the outcome file under umask 022.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::{Dir, reins};

const KEY: &str = "sk-echo-KEY-1234567890abcdef";
const HEADER: &str = "hdr-secret-4567890";
const USERINFO: &str = "userinfo-secret-789";

/// A gateway on 127.0.0.1 that refuses every request with a 400 whose message echoes the credentials it was
/// sent (its `Authorization` and `X-Gateway` headers), as some gateways do.
fn echoing_gateway() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let (mut length, mut sent) = (0usize, Vec::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    let k = k.trim().to_ascii_lowercase();
                    if k == "content-length" {
                        length = v.trim().parse().unwrap_or(0);
                    } else if k == "authorization" || k == "x-gateway" || k == "x-amz-security-token" {
                        sent.push(format!("{k}: {}", v.trim()));
                    }
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let message = format!("invalid request: you sent {}", sent.join(" and "));
            let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string();
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("127.0.0.1:{}", addr.port())
}

/// Bedrock's credentials are secrets too: a server that echoes the session token (sent as
/// `x-amz-security-token`, signed with SigV4) gets it masked in what Reins shows; the secret key itself is never sent.
#[test]
fn bedrock_aws_credentials_echoed_by_a_server_are_masked() {
    const TOKEN: &str = "aws-session-token-secret-4242";
    let gateway = echoing_gateway();
    let out = reins()
        .args(["run", "--json", "--no-store", "--model", "bedrock:eu.anthropic.claude-sonnet-4-5-20250929-v1:0"])
        .args(["--base-url", &format!("http://{gateway}"), "hello"])
        .env_remove("AWS_BEARER_TOKEN_BEDROCK")
        .env("AWS_ACCESS_KEY_ID", "AKIDREINSTEST0000000")
        .env("AWS_SECRET_ACCESS_KEY", "aws-secret-key-secret-4242")
        .env("AWS_SESSION_TOKEN", TOKEN)
        .env("AWS_REGION", "eu-west-3")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(8), "model_error: {stdout}\n{stderr}");
    assert!(stdout.contains("x-amz-security-token: <redacted>"), "{stdout}");
    assert!(stdout.contains("authorization: AWS4-HMAC-SHA256 Credential=AKIDREINSTEST0000000/"), "{stdout}");
    for secret in [TOKEN, "aws-secret-key-secret-4242"] {
        assert!(!format!("{stdout}{stderr}").contains(secret), "{secret} shown:\n{stdout}\n{stderr}");
    }
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Every file of the store (the database and, when there, its `-wal`), as bytes read lossily.
fn store_bytes(store: &Path) -> String {
    let mut all = String::new();
    for suffix in ["", "-wal"] {
        let mut p = store.as_os_str().to_owned();
        p.push(suffix);
        if let Ok(b) = std::fs::read(&p) {
            all.push_str(&String::from_utf8_lossy(&b));
        }
    }
    all
}

fn assert_clean(what: &str, text: &str) {
    for secret in [KEY, HEADER, USERINFO] {
        assert!(!text.contains(secret), "{what} holds the secret {secret:?}:\n{text}");
    }
}

#[test]
fn a_key_and_a_header_value_echoed_by_a_server_are_masked_in_everything_reins_records() {
    let dir = Dir::new("secrets-echo");
    let gateway = echoing_gateway();
    let agent = dir.file(
        "agent.toml",
        &format!(
            "model = \"openai-chat:echo-model\"\n[provider]\nbase_url = \"http://gw-user:{USERINFO}@{gateway}/v1\"\nstream = false\nheaders = {{ X-Gateway = \"{HEADER}\" }}\n"
        ),
    );
    let (store, outcome_file) = (dir.store(), dir.0.join("outcome.json"));
    let out = reins()
        .args(["run", "--json", "--agent"])
        .arg(&agent)
        .arg("--store")
        .arg(&store)
        .arg("--output")
        .arg(&outcome_file)
        .arg("hello")
        .env("OPENAI_API_KEY", KEY)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(8), "model_error: {stdout}\n{stderr}");

    // The server's message is recorded, with what it echoed masked.
    let outcome: serde_json::Value = serde_json::from_slice(&std::fs::read(&outcome_file).unwrap()).unwrap();
    let error = outcome["error"].as_str().unwrap();
    assert!(error.contains("you sent authorization: Bearer <redacted> and x-gateway: <redacted>"), "{error}");
    let id = outcome["session_id"].as_str().unwrap().to_owned();

    let page = dir.0.join("page.html");
    let view =
        reins().args(["sessions", "view", &id, "--output"]).arg(&page).arg("--store").arg(&store).output().unwrap();
    assert!(view.status.success(), "{:?}", text(&view));
    let show = reins().args(["sessions", "show", &id, "--json", "--store"]).arg(&store).output().unwrap();
    let export = reins().args(["sessions", "export", &id, "--store"]).arg(&store).output().unwrap();
    let events = reins().args(["sessions", "show", &id, "--events", "--store"]).arg(&store).output().unwrap();

    assert_clean("the JSON events", &stdout);
    assert!(stdout.contains("<redacted>"), "the model_error event carries the masked message: {stdout}");
    assert_clean("stderr", &stderr);
    assert_clean("the outcome file", &std::fs::read_to_string(&outcome_file).unwrap());
    assert_clean("the store", &store_bytes(&store));
    assert_clean("the session page", &std::fs::read_to_string(&page).unwrap());
    for o in [&show, &export, &events] {
        let (out, err) = text(o);
        assert_clean("sessions show/export", &format!("{out}{err}"));
    }
    // The base URL's credentials are not recorded: a resume must be given them again.
    let (shown, _) = text(&show);
    assert!(shown.contains("http://<redacted>@127.0.0.1"), "{shown}");
}

#[test]
fn config_show_masks_url_credentials_extra_body_values_and_every_mcp_env_value() {
    let dir = Dir::new("secrets-config");
    let agent = dir.file(
        "agent.toml",
        &format!(
            "model = \"openai-chat:m\"\n[provider]\nbase_url = \"http://gw-user:{USERINFO}@127.0.0.1:9/v1\"\nextra_body = {{ gateway_token = \"{HEADER}\" }}\n\
             [mcp.tool]\ncommand = \"true\"\nenv = {{ PLAIN_NAME = \"{KEY}\" }}\n\
             [mcp.web]\nurl = \"http://u:{USERINFO}@127.0.0.1:9/mcp\"\n"
        ),
    );
    for json in [false, true] {
        let mut cmd = reins();
        cmd.args(["config", "show", "--agent"]).arg(&agent);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}{stderr}");
        assert_clean("config show", &stdout);
        assert!(stdout.contains("<redacted>@127.0.0.1:9/v1") && stdout.contains("gateway_token"), "{stdout}");
        assert!(stdout.contains("PLAIN_NAME"), "the variable is named, its value masked: {stdout}");
    }
    // `reins mcp list` names each server (the URL's credentials masked) and why it did not start.
    for json in [false, true] {
        let mut cmd = reins();
        cmd.args(["mcp", "list", "--agent"]).arg(&agent);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = text(&out);
        assert_clean("mcp list", &format!("{stdout}{stderr}"));
        assert!(stdout.contains("<redacted>@127.0.0.1:9/mcp"), "{stdout}{stderr}");
    }
}

#[test]
fn an_mcp_server_gets_a_scrubbed_environment_and_what_it_says_is_masked() {
    let dir = Dir::new("secrets-mcp");
    let env_file = dir.0.join("env.txt");
    let script = dir.file("turns.json", r#"[{"content": "done"}]"#);
    // The server writes down its environment, says its token on stderr and exits: start-up fails and the
    // reason quotes its stderr.
    let agent = dir.file(
        "agent.toml",
        &format!(
            "model = \"script:{}\"\n[mcp.probe]\ncommand = \"sh\"\nargs = [\"-c\", \"env > '{}'; echo my token is $PROBE_SETTING >&2; exit 3\"]\nenv = {{ PROBE_SETTING = \"{HEADER}\" }}\n",
            script.display(),
            env_file.display()
        ),
    );
    let out = reins()
        .args(["run", "--no-store", "--agent"])
        .arg(&agent)
        .arg("hello")
        .env("OPENAI_API_KEY", KEY)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("SOME_SERVICE_CREDENTIAL", KEY)
        .env("UNRELATED_SETTING", "not-for-servers")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("my token is <redacted>"), "the server's stderr is quoted, masked: {stderr}");
    assert_clean("stderr", &stderr);
    let env = std::fs::read_to_string(&env_file).unwrap();
    let names: Vec<&str> = env.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    assert!(names.contains(&"PATH") && names.contains(&"PROBE_SETTING"), "{env}");
    for name in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SOME_SERVICE_CREDENTIAL", "UNRELATED_SETTING", "REINS_STORE"] {
        assert!(!names.contains(&name), "{name} reached the MCP server: {env}");
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_store_its_directory_and_the_outcome_file_are_private_under_umask_022() {
    let dir = Dir::new("secrets-modes");
    let script = dir.file("turns.json", r#"[{"content": "done"}]"#);
    let data = dir.0.join("data");
    let outcome = dir.0.join("outcome.json");
    let existing = dir.file("existing.json", "{}");
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644)).unwrap();
    for output in [&outcome, &existing] {
        // The default store location, under a data directory that does not exist yet.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "umask 022 && exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_reins")])
            .args(["run", "--model"])
            .arg(format!("script:{}", script.display()))
            .arg("--output")
            .arg(output)
            .arg("hello")
            .env_remove("REINS_STORE")
            .env("XDG_DATA_HOME", &data)
            .env("XDG_CONFIG_HOME", dir.0.join("no-config"));
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{:?}", text(&out));
        assert_eq!(mode(output), 0o600, "{}", output.display());
    }
    let store = data.join("reins/sessions.db");
    assert_eq!(mode(&data), 0o700, "a directory Reins made for its store");
    assert_eq!(mode(&data.join("reins")), 0o700);
    assert_eq!(mode(&store), 0o600);

    // A store an older Reins left readable by others, in its own directory at the default location, is made
    // private when opened.
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(data.join("reins"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out =
        reins().args(["sessions", "list"]).env_remove("REINS_STORE").env("XDG_DATA_HOME", &data).output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(mode(&store), 0o600);
    assert_eq!(mode(&data.join("reins")), 0o700);
    // A directory the user named for the store is left as it is.
    let named = dir.0.join("named");
    std::fs::create_dir(&named).unwrap();
    std::fs::set_permissions(&named, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = reins().args(["sessions", "list", "--store"]).arg(named.join("s.db")).output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!((mode(&named), mode(&named.join("s.db"))), (0o755, 0o600));
}

#[test]
fn a_base_url_s_credentials_are_masked_in_a_connection_error() {
    let dir = Dir::new("secrets-refused");
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let agent = dir.file(
        "agent.toml",
        &format!(
            "model = \"openai-chat:m\"\n[provider]\nbase_url = \"http://gw-user:{USERINFO}@127.0.0.1:{port}/v1\"\nmax_retries = 0\n"
        ),
    );
    let outcome_file = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "--no-store", "--json", "--agent"])
        .arg(&agent)
        .arg("--output")
        .arg(&outcome_file)
        .arg("hello")
        .env("OPENAI_API_KEY", KEY)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(8), "{stdout}{stderr}");
    let outcome = std::fs::read_to_string(&outcome_file).unwrap();
    assert!(outcome.contains("<redacted>@127.0.0.1"), "the URL is named, its credentials masked: {outcome}");
    for text in [&stdout, &stderr, &outcome] {
        assert_clean("a connection error", text);
    }
}
