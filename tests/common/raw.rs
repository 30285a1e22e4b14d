//! HTTP over a bare TCP connection, for what an HTTP library will not do: send a request's head
//! and then trickle its body a byte at a time.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::WAIT;

/// Sends `head` (the request line and headers, no blank line), then one byte of body every
/// `every` for as long as the server reads; returns what the server answered up to closing the
/// connection. Panics when the server has not closed it within [`WAIT`].
pub async fn trickle_body(addr: SocketAddr, head: &str, every: Duration) -> String {
    let (mut reader, mut writer) = TcpStream::connect(addr).await.expect("connect").into_split();
    writer
        .write_all(format!("{head}\r\n\r\n").as_bytes())
        .await
        .expect("send the head");
    let trickle = tokio::spawn(async move {
        while writer.write_all(b" ").await.is_ok() {
            tokio::time::sleep(every).await;
        }
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, reader.read_to_end(&mut answer)).await;
    trickle.abort();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(
        read.is_ok(),
        "the server did not answer and close within {WAIT:?}; so far: {answer:?}"
    );
    answer
}

/// Sends `head` (which announces a body) and never the body; returns what the server answered up
/// to closing the connection. Panics when the server has not closed it within [`WAIT`].
pub async fn head_without_body(addr: SocketAddr, head: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("{head}\r\n\r\n").as_bytes())
        .await
        .expect("send the head");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(
        read.is_ok(),
        "the server did not answer and close within {WAIT:?}; so far: {answer:?}"
    );
    answer
}
