//! Certificate-bound tokens end to end (issue 23, RFC 8705) through the real front door: the
//! Pingora proxy terminating mutual TLS (`client_auth: optional` against a test CA plus one
//! self-signed client certificate), the real authorization server behind it believing the
//! forwarded client certificate with the proxy secret only, and the example API. curl with
//! `--cert/--key` is the client: `client_credentials` authenticated by certificate
//! (`tls_client_auth` by SAN DNS name, `self_signed_tls_client_auth` by thumbprint) gives a token
//! bound to that certificate (opaque and JWT), which the API accepts with the same certificate
//! and refuses (401 `invalid_token`) with another or none; a forged certificate header sent to
//! the authorization server without the proxy secret is ignored.

use test_support::pki;

use std::path::{Path, PathBuf};
use std::process::Command;

use authserver::config::{AccessTokenFormat, Settings};
use authserver::mtls::TlsClientAuth;
use authserver::store::{ApplicationInput, ClientType, GrantType, Store};
use authserver::testing;
use base64::Engine;
use pki::Pki;
use resource_server::client_cert::der_from_escaped_pem;
use resource_server::identity::encode;
use resource_server::{CLIENT_CERT_HEADER, CertThumbprint, PROXY_SECRET_HEADER, ProxySecret};
use serde_json::Value;

const AUTH_SECRET: &str = "the-authorization-servers-proxy-secret-0123";

fn x5t(pem: &Path) -> String {
    let text = std::fs::read_to_string(pem).unwrap();
    let der = der_from_escaped_pem(encode(&text).as_bytes()).unwrap();
    CertThumbprint::of_der(&der).x5t_s256()
}

/// A self-signed client certificate (not a CA) in `pki`'s directory.
fn self_signed(pki: &Pki, name: &str) -> (PathBuf, PathBuf) {
    let (pem, key) = (
        pki.path(&format!("{name}.pem")),
        pki.path(&format!("{name}.key")),
    );
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&pem)
        .args(["-subj", &format!("/CN={name}"), "-days", "2"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=clientAuth"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (pem, key)
}

/// A confidential client_credentials application authenticating by `auth`.
async fn mtls_app(store: &Store, auth: TlsClientAuth, format: Option<AccessTokenFormat>) -> String {
    let input = ApplicationInput {
        name: format!("mtls {}", auth.method()),
        client_type: ClientType::Confidential,
        grant_type: GrantType::ClientCredentials,
        redirect_uris: String::new(),
        allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: format,
    };
    let (app, _) = store
        .create_application(&input, None, None, None)
        .await
        .unwrap();
    assert!(
        store
            .set_tls_client_auth(app.id, Some(&auth))
            .await
            .unwrap()
    );
    app.client_id
}

/// What curl got: status and body.
fn curl(port: u16, ca: &Path, args: &[&str], path: &str) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
        .args(args)
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.to_owned(), body.to_owned())
}

fn cert_args(cert: &(PathBuf, PathBuf)) -> Vec<String> {
    vec![
        "--cert".into(),
        cert.0.display().to_string(),
        "--key".into(),
        cert.1.display().to_string(),
    ]
}

struct Stack {
    port: u16,
    ca: PathBuf,
    auth_addr: std::net::SocketAddr,
    proxy: Option<proxy::ProxyHandle>,
}

impl Stack {
    /// curl through the front door, off the runtime.
    async fn curl(
        &self,
        cert: Option<&(PathBuf, PathBuf)>,
        args: &[&str],
        path: &str,
    ) -> (String, String) {
        let mut all: Vec<String> = cert.map(cert_args).unwrap_or_default();
        all.extend(args.iter().map(|s| s.to_string()));
        let (port, ca, path) = (self.port, self.ca.clone(), path.to_owned());
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = all.iter().map(String::as_str).collect();
            curl(port, &ca, &args, &path)
        })
        .await
        .unwrap()
    }

    /// client_credentials for `client_id` with `cert`: the access token, or the error answer.
    async fn token(
        &self,
        client_id: &str,
        cert: Option<&(PathBuf, PathBuf)>,
    ) -> Result<String, (String, String)> {
        let form = format!("grant_type=client_credentials&client_id={client_id}&scope=read");
        let (status, body) = self.curl(cert, &["-d", &form], "/o/token/").await;
        if status != "200" {
            return Err((status, body));
        }
        let json: Value = serde_json::from_str(&body).unwrap();
        Ok(json["access_token"].as_str().unwrap().to_owned())
    }

    async fn api(&self, token: &str, cert: Option<&(PathBuf, PathBuf)>) -> (String, String) {
        let bearer = format!("Authorization: Bearer {token}");
        self.curl(cert, &["-H", &bearer], "/users/").await
    }
}

/// The front door, its listener's `client_auth` as given. With `aliases`, the authorization
/// server announces the front door as its `mtls_endpoint_base`.
async fn stack(store: &Store, pki: &Pki, bundle: &Path, client_auth: &str, aliases: bool) -> Stack {
    let port = test_support::free_port();
    // The authorization server, believing the proxy's forwarded certificate with its secret.
    let mut settings = Settings::for_tests("unused");
    settings.proxy_secret = Some(ProxySecret::new(AUTH_SECRET).unwrap());
    if aliases {
        settings.mtls_endpoint_base = Some(format!("https://localhost:{port}"));
    }
    let auth_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let auth_addr = auth_listener.local_addr().unwrap();
    let app = authserver::app(authserver::AppState::new(settings, store.clone()));
    tokio::spawn(async move { axum::serve(auth_listener, app).await });
    let (introspector_id, introspector_secret) =
        testing::application(store, GrantType::ClientCredentials, true).await;

    // The example API behind the proxy (behind_proxy: it believes the proxy's identity headers).
    let api_secret = authserver::secrets::random_token();
    let proof = api_secret.clone();
    let api_config = example_api::config::Config::from_yaml_with_env(
        &std::fs::read_to_string("config/example-api.yaml").unwrap(),
        "config/example-api.yaml",
        move |key| (key == "EXAMPLE_API_PROXY_SECRET").then(|| proof.clone()),
    )
    .unwrap();
    let api_state = example_api::AppState::new(
        store.clone(),
        example_api::guard::Guard::from_config(&api_config).unwrap(),
    );
    let api_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = api_listener.local_addr().unwrap();
    tokio::spawn(example_api::serve(
        api_listener,
        api_state,
        std::future::pending(),
    ));

    let (cert, key) = pki.server("front-door");
    let (auth_secret_file, api_secret_file) = (pki.path("auth.secret"), pki.path("api.secret"));
    std::fs::write(&auth_secret_file, AUTH_SECRET).unwrap();
    std::fs::write(&api_secret_file, &api_secret).unwrap();
    let yaml = format!(
        r#"listen: 127.0.0.1:{port}
admin_listen: 127.0.0.1:0
threads: 1
work_stealing: true
grace_period: 0s
shutdown_timeout: 1s
tls:
  cert_file: {cert}
  key_file: {key}
  client_ca_file: {bundle}
  client_auth: {client_auth}
upstreams:
  authserver: {{ address: "{auth_addr}", pass_authorization: true, proxy_secret_file: "{auth_secret}" }}
  api: {{ address: "{api_addr}", proxy_secret_file: "{api_secret}" }}
introspection:
  url: http://{auth_addr}/o/introspect/
  client_id: {introspector_id}
  client_secret: {introspector_secret}
  cache: {{ max_ttl: 1s, negative_ttl: 1s, capacity: 100 }}
routes:
  - {{ name: oauth, prefix: /o/, upstream: authserver, public: true }}
  - {{ name: users-read, path: /users/, methods: [GET], upstream: api, scopes: [read] }}
"#,
        cert = cert.display(),
        key = key.display(),
        bundle = bundle.display(),
        auth_secret = auth_secret_file.display(),
        api_secret = api_secret_file.display(),
    );
    let file = pki.path("proxy.yaml");
    std::fs::write(&file, yaml).unwrap();
    let config = proxy::load_config(&file).unwrap();
    let proxy = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .unwrap();
    Stack {
        port,
        ca: pki.ca(),
        auth_addr,
        proxy: Some(proxy),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_bound_tokens_through_the_front_door() {
    let store = testing::store().await;
    let pki = Pki::new();
    let alice = pki.client("alice");
    let bob = pki.client("bob");
    let selfie = self_signed(&pki, "selfie");
    let bundle = pki.path("clients.pem");
    std::fs::write(
        &bundle,
        std::fs::read_to_string(pki.ca()).unwrap() + &std::fs::read_to_string(&selfie.0).unwrap(),
    )
    .unwrap();
    let by_san = mtls_app(
        &store,
        TlsClientAuth::SanDns("alice.clients.test".into()),
        None,
    )
    .await;
    let by_dn = mtls_app(
        &store,
        TlsClientAuth::SubjectDn("CN=alice".into()),
        Some(AccessTokenFormat::Jwt),
    )
    .await;
    let self_signed_app = mtls_app(&store, TlsClientAuth::SelfSigned(x5t(&selfie.0)), None).await;
    let mut s = stack(&store, &pki, &bundle, "optional", false).await;

    // The metadata announces certificate authentication and bound tokens.
    let metadata: Value = reqwest::get(format!(
        "http://{}/.well-known/oauth-authorization-server",
        s.auth_addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(metadata["tls_client_certificate_bound_access_tokens"], true);
    assert!(
        metadata.get("mtls_endpoint_aliases").is_none(),
        "{metadata}"
    );
    let methods = metadata["token_endpoint_auth_methods_supported"].to_string();
    assert!(
        methods.contains("\"tls_client_auth\"") && methods.contains("self_signed_tls_client_auth"),
        "{methods}"
    );

    // tls_client_auth by SAN: alice's certificate authenticates; bob's or none does not.
    let token = s.token(&by_san, Some(&alice)).await.unwrap();
    for (who, cert) in [("bob", Some(&bob)), ("nobody", None)] {
        let (status, body) = s.token(&by_san, cert).await.unwrap_err();
        assert_eq!(status, "401", "{who}: {body}");
        assert!(body.contains("invalid_client"), "{body}");
    }
    // The token is bound: the API with alice's certificate, not with bob's or none.
    let (status, body) = s.api(&token, Some(&alice)).await;
    assert_eq!(status, "200", "{body}");
    for (who, cert) in [("bob", Some(&bob)), ("nobody", None)] {
        let (status, body) = s.api(&token, cert).await;
        assert_eq!(status, "401", "{who}: {body}");
    }

    // tls_client_auth by subject DN, as a JWT carrying cnf.x5t#S256.
    let jwt = s.token(&by_dn, Some(&alice)).await.unwrap();
    let payload = jwt.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["cnf"]["x5t#S256"], x5t(&alice.0), "{claims}");
    assert_eq!(s.api(&jwt, Some(&alice)).await.0, "200");
    assert_eq!(s.api(&jwt, Some(&bob)).await.0, "401");

    // self_signed_tls_client_auth: the registered certificate only.
    let token = s.token(&self_signed_app, Some(&selfie)).await.unwrap();
    assert_eq!(
        s.token(&self_signed_app, Some(&alice)).await.unwrap_err().0,
        "401"
    );
    assert_eq!(s.api(&token, Some(&selfie)).await.0, "200");
    assert_eq!(s.api(&token, Some(&alice)).await.0, "401");

    // Straight to the authorization server: a forged certificate header is ignored without the
    // proxy secret, and believed with it.
    let http = reqwest::Client::new();
    let forged = encode(&std::fs::read_to_string(&alice.0).unwrap());
    let form = [
        ("grant_type", "client_credentials"),
        ("client_id", by_san.as_str()),
    ];
    let url = format!("http://{}/o/token/", s.auth_addr);
    let answer = http
        .post(&url)
        .header(CLIENT_CERT_HEADER, &forged)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.status(),
        401,
        "a forged certificate without the secret"
    );
    let answer = http
        .post(&url)
        .header(CLIENT_CERT_HEADER, &forged)
        .header(PROXY_SECRET_HEADER, "not-the-secret-but-long-enough")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401, "with a wrong secret");
    let answer = http
        .post(&url)
        .header(CLIENT_CERT_HEADER, &forged)
        .header(PROXY_SECRET_HEADER, AUTH_SECRET)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "with the proxy's secret");

    if let Some(proxy) = s.proxy.take() {
        tokio::task::spawn_blocking(move || proxy.shutdown_now())
            .await
            .unwrap();
    }
}

/// A JWKS of these certificates (RFC 8705 §2.2), each the `x5c` of one key.
fn jwks_of(certs: &[&Path]) -> String {
    let keys: Vec<Value> = certs
        .iter()
        .map(|pem| {
            let text = std::fs::read_to_string(pem).unwrap();
            let der = der_from_escaped_pem(encode(&text).as_bytes()).unwrap();
            serde_json::json!({
                "kty": "EC",
                "use": "sig",
                "x5c": [base64::engine::general_purpose::STANDARD.encode(der)],
            })
        })
        .collect();
    serde_json::json!({ "keys": keys }).to_string()
}

/// The front door as an RFC 8705 §5 alias (`client_auth: required`, announced in
/// `mtls_endpoint_aliases`): a token request there with a certificate; a JWKS registration
/// (either of its certificates, no other); subject DNs with `,` and `+` (RFC 4514), where a
/// look-alike subject is refused; UserInfo refuses a bound token without its certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_endpoint_aliases_a_registered_jwks_and_awkward_subject_dns() {
    let store = testing::store().await;
    let pki = Pki::new();
    // openssl -subj: `/CN=a,O=evil` is one RDN whose CN holds a comma; `/CN=a/O=evil` is two.
    let comma = pki.client_with_subject("comma", "/CN=a,O=evil");
    let two = pki.client_with_subject("two", "/CN=a/O=evil");
    let multi = pki.client_with_subject("multi", "/CN=m+UID=x");
    let split = pki.client_with_subject("split", "/CN=m/UID=x");
    let one = self_signed(&pki, "jwks-one");
    let other = self_signed(&pki, "jwks-two");
    let outsider = self_signed(&pki, "outsider");
    let bundle = pki.path("clients.pem");
    let mut pems = std::fs::read_to_string(pki.ca()).unwrap();
    for cert in [&one, &other, &outsider] {
        pems += &std::fs::read_to_string(&cert.0).unwrap();
    }
    std::fs::write(&bundle, pems).unwrap();
    let registered = |text: &str| TlsClientAuth::parse(text).unwrap();
    let escaped = mtls_app(&store, registered("subject_dn:CN=a\\,O=evil"), None).await;
    let plain = mtls_app(&store, registered("subject_dn:O=evil, CN=a"), None).await;
    let multi_valued = mtls_app(&store, registered("subject_dn:uid=x + cn=M"), None).await;
    let jwks = jwks_of(&[&one.0, &other.0]);
    let by_jwks = mtls_app(
        &store,
        registered(&format!("self_signed_jwks:{jwks}")),
        None,
    )
    .await;
    let mut s = stack(&store, &pki, &bundle, "required", true).await;

    // Both discovery documents announce the aliases at the front door.
    let base = format!("https://localhost:{}", s.port);
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let metadata: Value = reqwest::get(format!("http://{}{path}", s.auth_addr))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(metadata["tls_client_certificate_bound_access_tokens"], true);
        let aliases = &metadata["mtls_endpoint_aliases"];
        for (endpoint, at) in [
            ("token_endpoint", "/o/token/"),
            ("introspection_endpoint", "/o/introspect/"),
            ("revocation_endpoint", "/o/revoke_token/"),
        ] {
            assert_eq!(
                aliases[endpoint],
                format!("{base}{at}"),
                "{path}: {metadata}"
            );
        }
        // The plain endpoints stay where they were.
        assert_eq!(metadata["token_endpoint"], "http://127.0.0.1:8000/o/token/");
        let userinfo = aliases.get("userinfo_endpoint");
        if path.contains("openid") {
            assert_eq!(userinfo.unwrap(), &format!("{base}/o/userinfo/"));
        } else {
            assert!(userinfo.is_none(), "{metadata}");
        }
    }

    // At the alias (the token path of `Stack::token`): the listener requires a certificate.
    let (status, _) = s.token(&by_jwks, None).await.unwrap_err();
    assert_eq!(
        status, "000",
        "no certificate: no TLS session, no HTTP answer"
    );

    // The JWKS: either of its certificates authenticates, a third (also trusted by the
    // listener) does not; the token is bound to the one presented.
    let token = s.token(&by_jwks, Some(&one)).await.unwrap();
    s.token(&by_jwks, Some(&other)).await.unwrap();
    let (status, body) = s.token(&by_jwks, Some(&outsider)).await.unwrap_err();
    assert_eq!(status, "401", "{body}");
    assert!(body.contains("invalid_client"), "{body}");
    assert_eq!(s.api(&token, Some(&one)).await.0, "200");
    assert_eq!(s.api(&token, Some(&other)).await.0, "401");

    // UserInfo: the bound token with another certificate is refused as bound; with its own it
    // gets past the binding (and is then refused as a client's own token, not a user's).
    let bearer = format!("Authorization: Bearer {token}");
    let (status, answer) = s
        .curl(Some(&other), &["-D", "-", "-H", &bearer], "/o/userinfo/")
        .await;
    assert_eq!(status, "401", "{answer}");
    assert!(answer.contains("bound to a client certificate"), "{answer}");
    let (status, answer) = s
        .curl(Some(&one), &["-D", "-", "-H", &bearer], "/o/userinfo/")
        .await;
    assert_eq!(status, "401", "{answer}");
    assert!(answer.contains("not a user's"), "{answer}");
    assert!(
        !answer.contains("bound to a client certificate"),
        "{answer}"
    );

    // Subject DNs: a `,` inside a value is not a separator, and `+` joins one RDN.
    for (client_id, good, bad) in [
        (&escaped, &comma, &two),
        (&plain, &two, &comma),
        (&multi_valued, &multi, &split),
    ] {
        let token = s.token(client_id, Some(good)).await;
        assert!(token.is_ok(), "{}: {token:?}", good.0.display());
        let (status, body) = s.token(client_id, Some(bad)).await.unwrap_err();
        assert_eq!(status, "401", "{}: {body}", bad.0.display());
        assert!(body.contains("invalid_client"), "{body}");
    }

    if let Some(proxy) = s.proxy.take() {
        tokio::task::spawn_blocking(move || proxy.shutdown_now())
            .await
            .unwrap();
    }
}
