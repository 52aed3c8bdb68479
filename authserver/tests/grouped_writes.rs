//! Token writes committed in groups (issue 25, item 2), on SQLite and PostgreSQL: many concurrent
//! client_credentials requests through `POST /o/token/` each get a distinct token that
//! introspects active, and the writer's group-size metric shows groups of more than one.
//! (The only test of this binary: the metric is per process.)

mod support;

use authserver::store::{GrantType, WriterKind};
use authserver::testing;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::Replica;

/// Requests sent at once in each burst.
const BURST: usize = 64;
/// How long bursts are sent until a group of more than one write is seen.
const DEADLINE: Duration = Duration::from_secs(60);

/// Groups of more than one write `writer` has committed in this process, read from the
/// authserver's Prometheus text.
fn groups_larger_than_one(writer: WriterKind) -> u64 {
    let text = authserver::metrics::METRICS.render();
    let value = |line_start: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(line_start))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or_else(|| panic!("{line_start} in the metrics"))
    };
    let name = writer.as_str();
    let all = value(&format!(
        "tokengate_authserver_write_group_size_count{{writer=\"{name}\"}}"
    ));
    let of_one = value(&format!(
        "tokengate_authserver_write_group_size_bucket{{le=\"1.0\",writer=\"{name}\"}}"
    ));
    all - of_one
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_client_credentials_get_distinct_active_tokens_in_groups() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let writer = match backend {
            authserver::store::Backend::Sqlite => WriterKind::Sqlite,
            authserver::store::Backend::Postgres => WriterKind::Tokens,
        };
        let client = testing::application(&store, GrantType::ClientCredentials, true).await;
        let replica = Arc::new(Replica::start(store).await);
        let before = groups_larger_than_one(writer);
        let started = Instant::now();
        let mut bursts = 0;
        // Bursts until the metric shows a group of more than one (with one burst at least).
        while bursts == 0 || groups_larger_than_one(writer) == before {
            assert!(
                started.elapsed() < DEADLINE,
                "{backend:?}: {bursts} bursts of {BURST}, no group of more than one"
            );
            bursts += 1;
            let requests: Vec<_> = (0..BURST)
                .map(|_| {
                    let (replica, client) = (replica.clone(), client.clone());
                    tokio::spawn(async move {
                        let form = [("grant_type", "client_credentials")];
                        replica.post("/o/token/", &client, &form).await
                    })
                })
                .collect();
            let mut tokens = HashSet::new();
            for request in requests {
                let (status, body) = request.await.unwrap();
                assert_eq!(status, 200, "{backend:?}: {body}");
                tokens.insert(body["access_token"].as_str().unwrap().to_owned());
            }
            assert_eq!(tokens.len(), BURST, "{backend:?}: distinct tokens");
            for token in &tokens {
                let (status, body) = replica
                    .post("/o/introspect/", &client, &[("token", token)])
                    .await;
                assert_eq!(status, 200, "{backend:?}: {body}");
                assert_eq!(body["active"], true, "{backend:?}: {body}");
                assert_eq!(body["client_id"], client.0.as_str(), "{backend:?}: {body}");
            }
        }
        eprintln!("{backend:?}: groups of more than one after {bursts} burst(s)");
    }
}
