//! The streamable HTTP transport follows no redirect (issue 22, item 2): a server answering 307/308 with a
//! `Location` elsewhere gets an error naming it, and the second listener hears nothing — neither the headers
//! (tokens) nor the request.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use reins_mcp::{McpError, McpTools, ServerConfig};

/// A real HTTP server on 127.0.0.1 answering every request with `head` (a whole response, no body); counts the
/// connections it took and keeps what they sent.
struct Listener {
    port: u16,
    connections: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<u8>>>,
}

fn listener(head: impl Fn(u16) -> String + Send + 'static) -> Listener {
    let socket = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let received = Arc::new(Mutex::new(Vec::new()));
    let (c, r) = (Arc::clone(&connections), Arc::clone(&received));
    std::thread::spawn(move || {
        for stream in socket.incoming() {
            let Ok(mut stream) = stream else { continue };
            c.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 64 * 1024];
            let n = stream.read(&mut buf).unwrap_or(0);
            r.lock().unwrap().extend_from_slice(&buf[..n]);
            let _ = stream.write_all(head(port).as_bytes());
        }
    });
    Listener { port, connections, received }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed_and_the_error_names_its_location() {
    for status in ["307 Temporary Redirect", "308 Permanent Redirect"] {
        let elsewhere = listener(|_| {
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
        });
        let location = format!("http://localhost:{}/mcp", elsewhere.port);
        let to = location.clone();
        let redirecting = listener(move |_| {
            format!("HTTP/1.1 {status}\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        });
        let transport = reins_mcp::Transport::Http {
            url: format!("http://127.0.0.1:{}/mcp", redirecting.port),
            headers: [
                ("Authorization".to_owned(), "Bearer mcp-token-22".to_owned()),
                ("X-Api-Key".to_owned(), "mcp-header-secret".to_owned()),
            ]
            .into_iter()
            .collect(),
        };
        let config = ServerConfig::new("web", transport).unwrap();
        let err = McpTools::start(vec![config]).await.unwrap_err();
        assert!(matches!(err, McpError::Initialize { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&format!("redirects to {location:?}")), "{status}: {message}");
        assert!(message.contains("follows no redirect"), "{message}");
        assert_eq!(elsewhere.connections.load(Ordering::SeqCst), 0, "{status}: the redirect was followed");
        // The first server did get the request and its headers, as it should.
        let asked = String::from_utf8_lossy(&redirecting.received.lock().unwrap()).to_lowercase();
        assert!(asked.contains("x-api-key: mcp-header-secret"), "{asked}");
    }
}
