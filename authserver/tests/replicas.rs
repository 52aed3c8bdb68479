//! Two authserver replicas on one database (issue 9, item 6), on SQLite and PostgreSQL: an
//! application deleted on one is refused by the other with `401 invalid_client`, never a 500,
//! although the other still holds it in its client cache.

use authserver::config::Settings;
use authserver::store::{GrantType, Store};
use authserver::testing::{self, RunningServer};
use serde_json::Value;

struct Replica {
    store: Store,
    server: RunningServer,
    http: reqwest::Client,
}

impl Replica {
    async fn start(store: Store) -> Replica {
        let settings = Settings::for_tests("unused");
        let addr = "127.0.0.1:0".parse().unwrap();
        Replica {
            server: testing::spawn_server(store.clone(), settings, addr).await,
            store,
            http: reqwest::Client::new(),
        }
    }

    async fn post(
        &self,
        path: &str,
        client: &(String, String),
        form: &[(&str, &str)],
    ) -> (u16, Value) {
        let reply = self
            .http
            .post(format!("{}{path}", self.server.base_url))
            .basic_auth(&client.0, Some(&client.1))
            .form(form)
            .send()
            .await
            .unwrap();
        let status = reply.status().as_u16();
        (status, reply.json().await.unwrap_or(Value::Null))
    }
}

const PASSWORD_GRANT: [(&str, &str); 3] = [
    ("grant_type", "password"),
    ("username", "alice"),
    ("password", "wonderland"),
];
const CLIENT_CREDENTIALS: [(&str, &str); 1] = [("grant_type", "client_credentials")];

/// Deletes the application of `client` through `replica`'s store, as the views or CLI would.
async fn delete(replica: &Replica, client: &(String, String)) {
    let app = replica
        .store
        .find_application_by_client_id(&client.0)
        .await
        .unwrap()
        .unwrap();
    assert!(replica.store.delete_application(app.id).await.unwrap());
}

fn error_of(reply: &(u16, Value)) -> (u16, &str) {
    (reply.0, reply.1["error"].as_str().unwrap_or_default())
}

#[tokio::test]
async fn a_token_request_for_an_application_deleted_elsewhere_is_invalid_client() {
    for (a, b) in testing::all_replica_pairs().await {
        let backend = a.backend();
        testing::user(&a, "alice", "wonderland").await;
        let (a, b) = (Replica::start(a).await, Replica::start(b).await);
        for (grant, form) in [
            (GrantType::Password, &PASSWORD_GRANT[..]),
            (GrantType::ClientCredentials, &CLIENT_CREDENTIALS[..]),
        ] {
            let what = format!("{backend:?}, {grant:?}");
            let client = testing::application(&a.store, grant, false).await;
            // B authenticates the client once: its cache now holds the application.
            let warm = b.post("/o/token/", &client, form).await;
            assert_eq!(warm.0, 200, "{what}: {}", warm.1);
            delete(&a, &client).await;
            assert!(
                b.store
                    .find_application_by_client_id(&client.0)
                    .await
                    .unwrap()
                    .is_some(),
                "{what}: B still has the application cached"
            );
            let reply = b.post("/o/token/", &client, form).await;
            assert_eq!(
                error_of(&reply),
                (401, "invalid_client"),
                "{what}: {}",
                reply.1
            );
            // The failed insert evicted the stale entry: B now reads the deletion.
            assert!(
                b.store
                    .find_application_by_client_id(&client.0)
                    .await
                    .unwrap()
                    .is_none(),
                "{what}: evicted"
            );
            let reply = b.post("/o/token/", &client, form).await;
            assert_eq!(error_of(&reply), (401, "invalid_client"), "{what}");
        }
    }
}

/// The other endpoints that take the cached application: a refresh, an introspection and a
/// revocation by a client deleted on the other replica are answered, never with a 500.
#[tokio::test]
async fn other_endpoints_do_not_fail_for_an_application_deleted_elsewhere() {
    for (a, b) in testing::all_replica_pairs().await {
        let backend = a.backend();
        testing::user(&a, "alice", "wonderland").await;
        let (a, b) = (Replica::start(a).await, Replica::start(b).await);
        let client = testing::application(&a.store, GrantType::Password, false).await;
        let introspector = testing::application(&a.store, GrantType::ClientCredentials, true).await;
        let (status, tokens) = b.post("/o/token/", &client, &PASSWORD_GRANT).await;
        assert_eq!(status, 200, "{tokens}");
        let access = tokens["access_token"].as_str().unwrap();
        let refresh = tokens["refresh_token"].as_str().unwrap();
        let introspect = [("token", access)];
        let (status, answer) = b.post("/o/introspect/", &introspector, &introspect).await;
        assert_eq!((status, &answer["active"]), (200, &Value::Bool(true)));

        delete(&a, &client).await;
        // Its tokens went with it: a refresh is refused (the token is unknown now).
        let reply = b
            .post(
                "/o/token/",
                &client,
                &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
            )
            .await;
        assert_eq!(
            error_of(&reply),
            (400, "invalid_grant"),
            "{backend:?}: {}",
            reply.1
        );
        let (status, answer) = b.post("/o/introspect/", &introspector, &introspect).await;
        assert_eq!(
            (status, &answer["active"]),
            (200, &Value::Bool(false)),
            "{backend:?}"
        );
        let reply = b
            .post("/o/revoke_token/", &client, &[("token", refresh)])
            .await;
        assert_eq!(reply.0, 200, "{backend:?}: revocation");

        // The introspecting application itself deleted on A, still cached on B.
        delete(&a, &introspector).await;
        let (status, answer) = b.post("/o/introspect/", &introspector, &introspect).await;
        assert!(
            status < 500,
            "{backend:?}: introspection gave {status} {answer}"
        );
        assert_eq!(answer["active"], Value::Bool(false), "{backend:?}");
    }
}
