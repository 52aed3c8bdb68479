//! Reading an answer from the network whole, up to a size: every answer the gate takes from an
//! authorization server (introspection, JWKS, the revocation stream) goes through [`read`], so
//! none can make a binary buffer more than it planned for.

/// Why an answer was not read.
#[derive(Debug)]
pub enum BodyError {
    /// Larger than the limit (announced, or found while reading): nothing more is read.
    TooLarge,
    /// The connection failed or timed out while reading.
    Transport(reqwest::Error),
}

/// The body of `response`, refused once it would pass `max` bytes (at once when its
/// `Content-Length` says so).
pub async fn read(response: &mut reqwest::Response, max: usize) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Transport)? {
        if body.len() + chunk.len() > max {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers every connection with `head`, then `chunks` chunks of 64 KiB of
    /// `x` (chunked encoding) for as long as the client reads; how many it wrote.
    async fn server(head: &'static str, chunked: bool) -> (String, tokio::task::JoinHandle<usize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            socket.write_all(head.as_bytes()).await.unwrap();
            let chunk = vec![b'x'; 64 * 1024];
            let mut written = 0;
            // At most 1 GiB: the client must stop long before.
            while written < 16 * 1024 {
                let sent = if chunked {
                    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                    framed.extend_from_slice(&chunk);
                    framed.extend_from_slice(b"\r\n");
                    socket.write_all(&framed).await
                } else {
                    socket.write_all(&chunk).await
                };
                if sent.is_err() {
                    break;
                }
                written += 1;
            }
            written
        });
        (url, task)
    }

    #[tokio::test]
    async fn an_endless_chunked_answer_is_cut_at_the_limit() {
        let (url, task) = server(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
            true,
        )
        .await;
        let mut response = reqwest::get(&url).await.unwrap();
        let result = read(&mut response, 1024 * 1024).await;
        assert!(matches!(result, Err(BodyError::TooLarge)), "{result:?}");
        drop(response);
        let written = task.await.unwrap();
        // The client stopped reading soon after the limit (socket buffers hold a few MiB).
        assert!(
            written < 1024,
            "the server wrote {written} chunks of 64 KiB"
        );
    }

    #[tokio::test]
    async fn an_announced_length_over_the_limit_is_refused_before_reading() {
        let (url, task) = server(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n",
            false,
        )
        .await;
        let mut response = reqwest::get(&url).await.unwrap();
        assert!(matches!(
            read(&mut response, 1024).await,
            Err(BodyError::TooLarge)
        ));
        drop(response);
        task.abort();
    }

    #[tokio::test]
    async fn an_answer_within_the_limit_is_read_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": true}")
                .await;
        });
        let mut response = reqwest::get(&url).await.unwrap();
        assert_eq!(read(&mut response, 11).await.unwrap(), b"{\"a\": true}");
    }
}
