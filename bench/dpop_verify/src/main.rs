//! The DPoP proof check of the gate, measured alone: each proof verified (`dpop::verify`: JWS
//! parse, signature, claims, `ath`) and its `jti` put in the replay cache, N fresh proofs per
//! algorithm, best of 5 runs; then the replay cache filled with ENTRIES proofs (default 650 000:
//! 10 000 requests/s over the gate's 60 s window and 5 s leeway) and the process's resident
//! memory read before and after.

#[path = "../../../resource-server/src/dpop/mod.rs"]
#[allow(dead_code)]
mod dpop;

use dpop::signer::ProofSigner;
use std::time::Instant;

const URL: &str = "https://api.example/orders/";
const TOKEN: &str = "Zm9vYmFyYmF6cXV1eGZvb2JhcmJhenF1dXhmb29iYXI";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Resident memory of this process (bytes), from /proc/self/statm.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let entries: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(650_000);
    let htu = vec![dpop::normalize_htu(URL).unwrap()];
    println!("proofs per run: {n}");
    // N = 0: the memory figure alone, in a process that allocated nothing before it.
    let signers = if n == 0 {
        Vec::new()
    } else {
        vec![("ES256", ProofSigner::es256()), ("EdDSA", ProofSigner::eddsa())]
    };
    for (name, signer) in signers {
        let mut best = f64::MAX;
        let mut best_sig = f64::MAX;
        for _ in 0..5 {
            let proofs: Vec<String> = (0..n)
                .map(|_| signer.proof("GET", URL, now(), Some(TOKEN)))
                .collect();
            let cache = dpop::ReplayCache::new(n as u64 * 2, 60);
            let start = Instant::now();
            {
                for proof in &proofs {
                    let expected = dpop::Expected {
                        htm: "GET",
                        htu: &htu,
                        access_token: Some(TOKEN),
                        nonces: None,
                        now: now(),
                        window: 60,
                    };
                    let proven = dpop::verify(proof, &expected).expect("a valid proof");
                    assert!(cache.first_use(&proven.jkt, &proven.jti));
                }
            }
            best = best.min(start.elapsed().as_secs_f64() / n as f64);
            // The same proofs verified again without the cache: the check alone.
            let start = Instant::now();
            for proof in &proofs {
                let expected = dpop::Expected {
                    htm: "GET",
                    htu: &htu,
                    access_token: Some(TOKEN),
                    nonces: None,
                    now: now(),
                    window: 60,
                };
                dpop::verify(proof, &expected).expect("a valid proof");
            }
            best_sig = best_sig.min(start.elapsed().as_secs_f64() / n as f64);
        }
        println!(
            "{name}: {:.1} µs per proof (verify + replay cache), {:.1} µs verify alone",
            best * 1e6,
            best_sig * 1e6
        );
    }
    let cache = dpop::ReplayCache::new(entries as u64 * 2, 60);
    let before = rss();
    for i in 0..entries {
        assert!(cache.first_use("thumbprint-of-the-key-0123456789abcdefghijk", &i.to_string()));
    }
    let after = rss();
    println!(
        "replay cache: {entries} proofs, resident memory +{:.1} MiB ({:.0} bytes per proof)",
        (after - before) as f64 / (1 << 20) as f64,
        (after - before) as f64 / entries as f64
    );
}
