//! The OTLP/HTTP exporter follows no redirect (issue 22, item 2): a collector answering 307/308 with a
//! `Location` elsewhere costs one warning naming it, and the second listener hears nothing — neither the spans nor
//! the `OTEL_EXPORTER_OTLP_HEADERS` tokens.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{Dir, reins};
use serde_json::json;

/// A real HTTP server on 127.0.0.1 answering every request with `head` (no body); counts its connections and keeps
/// the request heads it read.
struct Listener {
    port: u16,
    connections: Arc<AtomicUsize>,
    heads: Arc<Mutex<String>>,
}

fn listener(head: String) -> Listener {
    let socket = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(String::new()));
    let (c, h) = (Arc::clone(&connections), Arc::clone(&heads));
    std::thread::spawn(move || {
        for stream in socket.incoming() {
            let Ok(mut stream) = stream else { continue };
            c.fetch_add(1, Ordering::SeqCst);
            let mut got = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            h.lock().unwrap().push_str(&String::from_utf8_lossy(&got));
            let _ = stream.write_all(head.as_bytes());
        }
    });
    Listener { port, connections, heads }
}

#[test]
fn a_collector_redirect_is_not_followed_and_the_warning_names_it() {
    let dir = Dir::new("otlp-redirect");
    let script = dir.file("s.json", &json!([{"content": "the answer"}]).to_string());
    for status in ["307 Temporary Redirect", "308 Permanent Redirect"] {
        let elsewhere = listener("HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into());
        let location = format!("http://localhost:{}/v1/traces", elsewhere.port);
        let collector = listener(format!(
            "HTTP/1.1 {status}\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ));
        let out = reins()
            .args(["run", "--no-store", "--model", &format!("script:{}", script.display())])
            .args(["--otlp", &format!("http://127.0.0.1:{}", collector.port), "Hi"])
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .env("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-token=otlp-secret-22")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{status}: {err}");
        assert_eq!(elsewhere.connections.load(Ordering::SeqCst), 0, "{status}: the redirect was followed");
        assert!(collector.heads.lock().unwrap().contains("otlp-secret-22"), "the collector got the spans");
        let warnings: Vec<&str> = err.lines().filter(|l| l.contains("cannot send traces")).collect();
        assert_eq!(warnings.len(), 1, "{status}: {err}");
        assert!(warnings[0].contains(&format!("redirects to {location:?}")), "{status}: {err}");
        assert!(!err.contains("otlp-secret-22"), "{err}");
    }
}
