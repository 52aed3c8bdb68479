//! Benchmark reference: the median time of one argon2id verification with the server's parameters.

use std::time::Instant;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let hash = authserver::secrets::hash_password("benchmark".into()).await?;
    let mut times = Vec::new();
    for _ in 0..21 {
        let start = Instant::now();
        assert!(authserver::secrets::verify_password("benchmark".into(), Some(hash.clone())).await);
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    println!("{:.3}", times[times.len() / 2]);
    Ok(())
}
