//! `reins ui`'s server and its connections: one that sends nothing, one that sends half a request head and one
//! kept alive after its answer are each closed after the idle timeout, and the server answers a new one.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use reins_store::Store;

/// Reads until the peer closes: true when it did (end of stream or a reset), false when nothing came for a
/// minute (a guard: the server is meant to close long before).
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn idle_and_half_open_connections_are_closed_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let token = reins_view::server::new_token().unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let options = reins_view::server::ServeOptions { idle_timeout: Duration::from_millis(300) };
    let server = rt.spawn(reins_view::server::serve_with(listener, store, token.clone(), cancel.clone(), options));

    // Sends nothing.
    let mut silent = TcpStream::connect(addr).unwrap();
    // Sends the start of a request head and stops.
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET /?token=").unwrap();
    // A whole request, answered, then the connection is kept alive and says nothing more.
    let mut kept = TcpStream::connect(addr).unwrap();
    write!(kept, "GET /api/sessions/stamp?token={token} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    assert!(closed_by_server(&mut silent), "a connection that sent nothing stayed open");
    assert!(closed_by_server(&mut half), "a connection that sent half a request head stayed open");
    assert!(closed_by_server(&mut kept), "an idle kept-alive connection stayed open");

    // The server still answers.
    let mut fresh = TcpStream::connect(addr).unwrap();
    write!(fresh, "GET /api/sessions/stamp?token={token} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    fresh.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    cancel.cancel();
    rt.block_on(server).unwrap().unwrap();
}
