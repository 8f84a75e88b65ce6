//! `[provider] response_deadline` reaches the provider: a server that only trickles SSE comments (each within
//! the idle timeout) ends the run at the agent file's deadline, not never.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use reins::Status;
use reins_agent::AgentDef;
use tokio_util::sync::CancellationToken;

/// A real server on 127.0.0.1 answering every request with an event stream of comments only, until the client
/// goes away.
fn comment_trickler() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 64 * 1024];
                let _ = stream.read(&mut buf);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                while stream.write_all(b": still here\n").is_ok() {
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn the_agent_files_response_deadline_ends_a_trickled_call() {
    let port = comment_trickler();
    let text = format!(
        "model = \"openai-chat:local-model\"\n[provider]\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\
         response_deadline = \"300ms\"\nidle_timeout = \"1m\"\nmax_retries = 1\ninitial_backoff = \"10ms\"\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let def = AgentDef::from_toml(&text, dir.path()).unwrap();
    let agent = def.build().await.unwrap();
    let outcome = agent.run("Hi", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::ModelError);
    let error = outcome.error.unwrap_or_default();
    assert!(
        error.contains("no content within 300ms (the provider's response_deadline) (gave up after 2 attempts)"),
        "{error}"
    );
}
