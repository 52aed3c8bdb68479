//! Two APIs behind two proxies, each its own `resource`: a token is good only at the API it was
//! issued for, introspected (a stand-in authorization server that puts `aud` in its answers) or
//! a JWT (Ed25519, keys from a JWKS file), and a token without `aud` is good at neither. Each
//! proxy serves its RFC 9728 metadata (both path forms) and points to it from its 401s (gRPC
//! refusals too); its forward-auth listener does the same; and a client nobody here wrote
//! (Python's httpx and requests) finds the metadata from the 401 alone.

mod common;

use test_support::ed25519_jwt;

use std::collections::BTreeMap;

use common::{config_yaml, echo_upstream, free_port, serve, start_proxy, two_free_ports, unix_now};
use ed25519_jwt::{JwksFile, jwk, key, sign};
use serde_json::{Value, json};

const ISSUER: &str = "https://auth.example.test";
const DESCRIPTION: &str = "The access token is not meant for this API.";

/// One API: its proxy and what tells its tokens apart.
struct Api {
    name: &'static str,
    resource: String,
    /// The metadata URL (RFC 9728 §3.1).
    metadata: String,
    proxy: proxy::ProxyHandle,
    path: std::path::PathBuf,
}

impl Api {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy.listen_addr())
    }
}

/// The stand-in authorization server's introspection answer: `<api>-op` is active with that
/// API's resource as `aud`, `none-op` has no `aud`.
fn introspection_answer(token: &str, audiences: &BTreeMap<String, String>) -> Value {
    let mut answer = json!({"active": true, "scope": "read", "client_id": "app-1",
                            "username": "alice", "exp": unix_now() + 3600,
                            "token_type": "Bearer"});
    match token.strip_suffix("-op") {
        Some("none") => {}
        Some(api) if audiences.contains_key(api) => answer["aud"] = json!(audiences[api]),
        _ => return json!({"active": false}),
    }
    answer
}

fn jwt_claims(aud: Option<&str>) -> Value {
    let t = unix_now();
    let mut claims = json!({"iss": ISSUER, "sub": "7", "client_id": "app-1", "scope": "read",
                            "username": "alice", "iat": t, "exp": t + 3600,
                            "jti": format!("j-{t}-{}", aud.unwrap_or("none"))});
    if let Some(aud) = aud {
        claims["aud"] = json!(aud);
    }
    claims
}

struct TwoApis {
    orders: Api,
    billing: Api,
    _jwks: JwksFile,
    signer: ed25519_dalek::SigningKey,
    forward_auth: std::net::SocketAddr,
    client: reqwest::Client,
}

impl TwoApis {
    /// Two proxies (`jwt_or_introspection`) in front of two upstreams: orders, whose resource
    /// is its origin, and billing, whose resource has a path; billing also has a forward-auth
    /// listener.
    async fn start() -> TwoApis {
        let signer = key(31);
        let jwks = JwksFile::new(&[jwk(&signer, Some("k1"))]);
        let ports = [two_free_ports(), two_free_ports()];
        let resources = [
            ("orders", format!("http://127.0.0.1:{}", ports[0].0)),
            (
                "billing",
                format!("http://127.0.0.1:{}/billing", ports[1].0),
            ),
        ];
        let audiences: BTreeMap<String, String> = resources
            .iter()
            .map(|(n, r)| ((*n).to_owned(), r.clone()))
            .collect();
        let introspection = serve(move |req| {
            let audiences = audiences.clone();
            async move { (200, introspection_answer(&req.form_token(), &audiences)) }
        })
        .await;
        let introspection_url = format!("http://{introspection}/o/introspect/");
        let forward_auth = free_port();
        let mut apis = Vec::new();
        for (i, (name, resource)) in resources.into_iter().enumerate() {
            let upstream = echo_upstream().await;
            let (listen, admin) = ports[i];
            let routes = "routes:\n  - { name: read, prefix: /, upstream: api, scopes: [read] }\n";
            let extra = match name {
                "billing" => format!(
                    "forward_auth: {{ listen: \"127.0.0.1:{forward_auth}\", ingress: nginx, trusted_peers: [127.0.0.1] }}\n"
                ),
                _ => String::new(),
            };
            let yaml = format!(
                "work_stealing: true\ntoken_source: jwt_or_introspection\nresource: '{resource}'\n\
                 authorization_servers: ['{ISSUER}']\nresource_name: {name}\n{extra}\
                 jwt: {{ jwks_file: '{}', issuer: '{ISSUER}', algorithms: [EdDSA] }}\n{}",
                jwks.0.display(),
                config_yaml(listen, admin, &introspection_url, upstream, routes)
            );
            let (proxy, path) = start_proxy(name, &yaml).await;
            let metadata = match resource.split_once("/billing") {
                Some((origin, _)) => {
                    format!("{origin}/.well-known/oauth-protected-resource/billing")
                }
                None => format!("{resource}/.well-known/oauth-protected-resource"),
            };
            apis.push(Api {
                name,
                resource,
                metadata,
                proxy,
                path,
            });
        }
        let billing = apis.pop().unwrap();
        let orders = apis.pop().unwrap();
        let forward_auth = billing.proxy.forward_auth_addr().unwrap();
        TwoApis {
            orders,
            billing,
            _jwks: jwks,
            signer,
            forward_auth,
            client: reqwest::Client::new(),
        }
    }

    /// The token of `source` (`introspection` or `jwt`) for `api` (`None`: without `aud`).
    fn token(&self, source: &str, api: Option<&Api>) -> String {
        match source {
            "introspection" => format!("{}-op", api.map_or("none", |a| a.name)),
            _ => sign(
                &self.signer,
                Some("k1"),
                &jwt_claims(api.map(|a| a.resource.as_str())),
            ),
        }
    }

    async fn get(&self, url: &str, token: Option<&str>) -> reqwest::Response {
        let mut req = self.client.get(url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.unwrap()
    }

    async fn stop(self) {
        for api in [self.orders, self.billing] {
            let _ = std::fs::remove_file(&api.path);
            tokio::task::spawn_blocking(move || api.proxy.shutdown_now())
                .await
                .unwrap();
        }
    }
}

/// The challenge of a token not meant for the API whose metadata is at `metadata`.
fn wrong_audience(metadata: &str) -> String {
    format!(
        "Bearer realm=\"api\", error=\"invalid_token\", error_description=\"{DESCRIPTION}\", \
         resource_metadata=\"{metadata}\""
    )
}

fn challenge(resp: &reqwest::Response) -> String {
    resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_api_refuses_the_other_apis_tokens_and_tokens_without_audience() {
    let t = TwoApis::start().await;
    let mut table = vec!["API       source         this  other  no-aud".to_owned()];
    for (api, other) in [(&t.orders, &t.billing), (&t.billing, &t.orders)] {
        for source in ["introspection", "jwt"] {
            let mut row = Vec::new();
            for (case, token) in [
                ("this", t.token(source, Some(api))),
                ("other", t.token(source, Some(other))),
                ("no aud", t.token(source, None)),
            ] {
                // Twice: the second answer comes from the introspection or JWT cache.
                for round in 0..2 {
                    let resp = t.get(&api.url("/orders/7"), Some(&token)).await;
                    let status = resp.status().as_u16();
                    let what = format!("{} {source} {case} (round {round})", api.name);
                    if case == "this" {
                        assert_eq!(status, 200, "{what}");
                    } else {
                        assert_eq!(status, 401, "{what}");
                        assert_eq!(challenge(&resp), wrong_audience(&api.metadata), "{what}");
                    }
                    if round == 1 {
                        row.push(status);
                    }
                }
            }
            table.push(format!(
                "{:<9} {source:<14} {:<5} {:<6} {}",
                api.name, row[0], row[1], row[2]
            ));
        }
    }
    // The table of issue 39 (cargo test -- --nocapture prints it).
    eprintln!("{}", table.join("\n"));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_proxy_serves_its_metadata_and_names_it_in_its_challenges() {
    let t = TwoApis::start().await;
    for api in [&t.orders, &t.billing] {
        // The 401 for a missing token names the route's scope and the metadata.
        let resp = t.get(&api.url("/x"), None).await;
        assert_eq!(resp.status(), 401);
        assert_eq!(
            challenge(&resp),
            format!(
                "Bearer realm=\"api\", scope=\"read\", resource_metadata=\"{}\"",
                api.metadata
            )
        );
        let resp = t.get(&api.metadata, None).await;
        assert_eq!(resp.status(), 200, "{}", api.metadata);
        assert_eq!(resp.headers()["cache-control"], "public, max-age=3600");
        assert_eq!(resp.headers()["access-control-allow-origin"], "*");
        let doc: Value = resp.json().await.unwrap();
        assert_eq!(
            doc,
            json!({"resource": api.resource, "authorization_servers": [ISSUER],
                   "scopes_supported": ["read"], "bearer_methods_supported": ["header"],
                   "resource_name": api.name})
        );
        // A token is never asked for, and hostile or other requests get no document.
        let bare = api.url("/.well-known/oauth-protected-resource");
        let resp = t.get(&bare, Some("garbage token")).await;
        assert_eq!(resp.status(), 200, "the bare form too");
        for (method, path, status) in [
            ("POST", "/.well-known/oauth-protected-resource", 405),
            ("DELETE", "/.well-known/oauth-protected-resource", 405),
            (
                "GET",
                "/.well-known/oauth-protected-resource/elsewhere",
                404,
            ),
            ("GET", "/.well-known/oauth-protected-resource/../x", 401),
            ("OPTIONS", "/.well-known/oauth-protected-resource", 204),
        ] {
            let resp = t
                .client
                .request(method.parse().unwrap(), api.url(path))
                .send()
                .await
                .unwrap();
            assert_eq!(
                resp.status().as_u16(),
                status,
                "{} {method} {path}",
                api.name
            );
        }
    }
    // The billing metadata's path form is billing's only: orders answers 404 for it.
    let resp = t
        .get(
            &t.orders
                .url("/.well-known/oauth-protected-resource/billing"),
            None,
        )
        .await;
    assert_eq!(resp.status(), 404);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_answers_the_metadata_and_the_challenge_the_proxy_would() {
    let t = TwoApis::start().await;
    let fa = |path: &str| format!("http://{}{path}", t.forward_auth);
    // nginx routes the metadata path to the decision endpoint itself.
    let resp = t
        .get(&fa("/.well-known/oauth-protected-resource/billing"), None)
        .await;
    assert_eq!(resp.status(), 200);
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["resource"], t.billing.resource.as_str());
    // The decision for a request with the orders API's token: the proxy's 401.
    let resp = t
        .client
        .get(fa("/auth"))
        .header("X-Original-URI", "/invoices/1")
        .header("X-Original-Method", "GET")
        .bearer_auth(t.token("jwt", Some(&t.orders)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(challenge(&resp), wrong_audience(&t.billing.metadata));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_grpc_call_gets_the_same_challenge_with_its_status() {
    let t = TwoApis::start().await;
    // Over HTTP/1.1 the gRPC status is in the headers (over h2, in the trailers).
    let resp = t
        .client
        .post(t.orders.url("/shop.Orders/Get"))
        .header("content-type", "application/grpc")
        .bearer_auth(t.token("introspection", Some(&t.billing)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["grpc-status"], "16", "UNAUTHENTICATED");
    assert_eq!(challenge(&resp), wrong_audience(&t.orders.metadata));
    t.stop().await;
}

/// Python's httpx and requests: no code of ours on the client side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_finds_the_metadata_from_the_401() {
    let found = std::process::Command::new("python3")
        .args(["-c", "import httpx, requests"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").is_err(),
            "CI must install httpx and requests"
        );
        eprintln!("SKIPPED: pip install httpx requests");
        return;
    }
    let t = TwoApis::start().await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/resource_metadata_client.py"
    );
    let mut command = std::process::Command::new("python3");
    command.args([
        script,
        &t.billing.url("/invoices/"),
        &t.billing.resource,
        &t.token("introspection", Some(&t.billing)),
        &t.token("jwt", Some(&t.orders)),
    ]);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "resource_metadata_client.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(seen["no_token"], 401);
    assert_eq!(seen["challenge"]["scope"], "read");
    assert_eq!(
        seen["challenge"]["resource_metadata"],
        t.billing.metadata.as_str()
    );
    assert_eq!(seen["metadata_cors"], "*");
    assert_eq!(seen["metadata"]["resource"], t.billing.resource.as_str());
    assert_eq!(seen["metadata"]["authorization_servers"], json!([ISSUER]));
    assert_eq!(
        (seen["own_token"].as_u64(), seen["other_token"].as_u64()),
        (Some(200), Some(401))
    );
    assert_eq!(seen["other_challenge"]["error_description"], DESCRIPTION);
    t.stop().await;
}
