//! Benchmark ceiling: an axum hello-world on the same runtime settings as the authserver.
//! `cargo run --release -p authserver --example hello -- 127.0.0.1:9000`

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".into());
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "Hello, World!" }));
    axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await
}
