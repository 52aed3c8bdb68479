//! TLS to upstreams against a Python HTTPS server with a test CA: verified with the CA bundle
//! and the SNI (by default the address), refused (502) with another CA, the system roots, or a
//! name the certificate lacks; accepted unverified only with `insecure_skip_verify: true`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::{Introspector, config_yaml, echo_upstream, start_proxy, two_free_ports};
use test_support::pki::Pki;

const HTTPS_SERVER: &str = r#"
import http.server, ssl, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"tls-upstream"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn https_server(pki: &Pki) -> Server {
    let (cert, key) = pki.server("upstream");
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(HTTPS_SERVER)
        .arg(cert)
        .arg(key)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().expect("the server prints its port");
    Server(child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_certificates_are_verified_against_the_configured_ca_and_name() {
    let pki = Pki::new();
    let other = Pki::new();
    let server = https_server(&pki);
    let (ca, wrong) = (
        pki.ca().display().to_string(),
        other.ca().display().to_string(),
    );
    let at = format!("127.0.0.1:{}", server.1);
    let upstreams = format!(
        r#"upstreams:
  good: {{ address: "{at}", tls: {{ ca_file: "{ca}" }} }}
  wrongca: {{ address: "{at}", tls: {{ ca_file: "{wrong}" }} }}
  system: {{ address: "{at}", tls: {{}} }}
  sniok: {{ address: "{at}", tls: {{ ca_file: "{ca}", sni: localhost }} }}
  snibad: {{ address: "{at}", tls: {{ ca_file: "{ca}", sni: other.example }} }}
  insecure: {{ address: "{at}", tls: {{ ca_file: "{wrong}", insecure_skip_verify: true }} }}
  cleartext: {{ address: "{at}" }}
"#
    );
    let names = [
        "good",
        "wrongca",
        "system",
        "sniok",
        "snibad",
        "insecure",
        "cleartext",
    ];
    let mut routes = String::from("routes:\n");
    for n in names {
        routes.push_str(&format!(
            "  - {{ name: {n}, path: /{n}, upstream: {n}, public: true }}\n"
        ));
    }
    let introspector = Introspector::start().await;
    let echo = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let yaml = config_yaml(listen, admin, &introspector.url(), echo, &routes)
        .replace("upstreams:\n", &upstreams);
    let (proxy, config) = start_proxy("upstream-tls", &yaml).await;

    let client = reqwest::Client::new();
    let mut seen = Vec::new();
    for n in names {
        let resp = client
            .get(format!("http://127.0.0.1:{listen}/{n}"))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        seen.push((n, status, body == "tls-upstream"));
    }
    assert_eq!(
        seen,
        [
            ("good", 200, true),
            ("wrongca", 502, false),
            ("system", 502, false),
            ("sniok", 200, true),
            ("snibad", 502, false),
            ("insecure", 200, true),
            ("cleartext", 502, false),
        ]
    );

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[test]
fn a_bad_ca_file_or_h2c_over_tls_is_a_config_error() {
    let pki = Pki::new();
    let (_, key) = pki.server("x");
    let parse = |upstream: String| {
        let src = format!(
            "listen: 127.0.0.1:1\nadmin_listen: 127.0.0.1:2\nupstreams: {{ api: {upstream} }}\nintrospection: {{ url: \"http://127.0.0.1:4/\", auth_token: t }}\nroutes: [ {{ name: r, prefix: /, upstream: api, public: true }} ]\n"
        );
        proxy::parse_config(&src, "proxy.yaml", |_| None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let ca = pki.ca().display().to_string();
    assert_eq!(
        parse(format!(
            "{{ address: \"127.0.0.1:3\", tls: {{ ca_file: \"{ca}\" }} }}"
        )),
        Ok(())
    );
    let err = parse(format!(
        "{{ address: \"127.0.0.1:3\", tls: {{ ca_file: \"{}\" }} }}",
        key.display()
    ))
    .unwrap_err();
    assert!(
        err.contains("\"upstreams.api.tls.ca_file\"") && err.contains("no CERTIFICATE"),
        "{err}"
    );
    let err = parse("{ address: \"127.0.0.1:3\", tls: { ca_file: /nonexistent.pem } }".into())
        .unwrap_err();
    assert!(
        err.contains("tls.ca_file") && err.contains("cannot read"),
        "{err}"
    );
    let err = parse("{ address: \"127.0.0.1:3\", h2c: true, tls: {} }".into()).unwrap_err();
    assert!(err.contains("\"upstreams.api.h2c\""), "{err}");
}
