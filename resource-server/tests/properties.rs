//! Property tests (proptest) over the parsers that read the network and the operators' files:
//! bearer parsing, route rules and path matching, introspection answers, identity headers.
//! No input panics, and the invariants the proxy relies on hold.

use http::{HeaderMap, HeaderValue, Method, header::AUTHORIZATION};
use proptest::prelude::*;
use resource_server::bearer::{MULTIPLE_HEADERS, QUERY_TOKEN};
use resource_server::claims::MAX_TIME;
use resource_server::identity::{decode, encode};
use resource_server::rules::KNOWN_METHODS;
use resource_server::{Bearer, Claims, IDENTITY_HEADERS, Identity, Rules, bearer_token};
use serde_json::{Map, Number, Value};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    }
}

// ---- strategies ----

/// Characters that make trouble: `%`, spaces, controls, Unicode whitespace, non-ASCII, emoji.
fn tricky_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::char::range('a', 'z'),
        2 => any::<char>(),
        1 => prop::sample::select(vec![
            '%', ' ', '\t', '\r', '\n', '\0', '\u{7f}', '\u{85}', '\u{a0}', '\u{3000}', 'é', '日',
            '🦀', '"', '\\', '+', '/', '=', '.', ':', ',', ';',
        ]),
    ]
}

fn tricky_string() -> impl Strategy<Value = String> {
    prop::collection::vec(tricky_char(), 0..24).prop_map(|v| v.into_iter().collect())
}

/// Bytes a header value may hold (HTAB, SP, visible ASCII, obs-text).
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            Just(b' '),
            Just(b'\t'),
            Just(b'='),
            0x21u8..=0x7e,
            0x80u8..=0xff
        ],
        0..48,
    )
}

fn b64token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._~+/-]{1,40}={0,3}"
}

/// Any JSON value, nested a little.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (0..=MAX_TIME + 10).prop_map(Value::from),
        tricky_string().prop_map(Value::String),
        prop::sample::select(vec![
            "true",
            "false",
            "refresh_token",
            "1700000000",
            "read write"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((tricky_string(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

const FIELDS: [&str; 11] = [
    "active",
    "scope",
    "client_id",
    "username",
    "exp",
    "iat",
    "nbf",
    "sub",
    "token_type",
    "iss",
    "aud",
];

/// An introspection answer: an object whose known fields are often right and often not.
fn answer() -> impl Strategy<Value = Value> {
    let field = |name: &'static str| {
        let likely: BoxedStrategy<Value> = match name {
            "active" => prop_oneof![
                4 => Just(Value::Bool(true)),
                1 => prop::sample::select(vec![Value::from("true"), Value::from(1), Value::from("True")]),
            ]
            .boxed(),
            "exp" | "iat" | "nbf" => prop_oneof![
                (0..=MAX_TIME).prop_map(Value::from),
                (0.0..=MAX_TIME as f64).prop_map(Value::from),
            ]
            .boxed(),
            "scope" | "aud" => prop_oneof![
                tricky_string().prop_map(Value::String),
                prop::collection::vec(tricky_string().prop_map(Value::String), 0..4)
                    .prop_map(Value::Array),
            ]
            .boxed(),
            _ => tricky_string().prop_map(Value::String).boxed(),
        };
        prop::option::weighted(0.8, prop_oneof![3 => likely, 1 => json_value()])
            .prop_map(move |v| (name, v))
    };
    (
        FIELDS.map(field),
        prop::collection::vec((tricky_string(), json_value()), 0..3),
    )
        .prop_map(|(known, extra)| {
            let mut map: Map<String, Value> = extra.into_iter().collect();
            for (name, value) in known {
                if let Some(v) = value {
                    map.insert(name.to_owned(), v);
                }
            }
            Value::Object(map)
        })
}

fn identity() -> impl Strategy<Value = Identity> {
    (
        prop::option::of(tricky_string()),
        prop::option::of(tricky_string()),
        prop::collection::vec(tricky_string(), 0..4),
        prop::option::of(0..=MAX_TIME),
        prop::collection::vec(tricky_string(), 0..3),
    )
        .prop_map(|(username, client_id, scopes, exp, groups)| Identity {
            username,
            client_id,
            scope: scopes
                .iter()
                .flat_map(|s| s.split_whitespace())
                .collect::<Vec<_>>()
                .join(" "),
            exp,
            // Any text but empty: names may hold spaces.
            groups: groups.into_iter().filter(|g| !g.is_empty()).collect(),
        })
}

/// The headers as a proxy sends them, read back by the example API's way.
fn read_back(id: &Identity) -> Identity {
    let headers = id.headers();
    let mut map = HeaderMap::new();
    for (name, value) in &headers {
        let value = HeaderValue::from_str(value)
            .unwrap_or_else(|_| panic!("{name}: {value:?} is not a header value"));
        map.append(*name, value);
    }
    let values = IDENTITY_HEADERS.map(|n| map.get(n).map(HeaderValue::as_bytes));
    Identity::from_header_values(values).expect("the headers read back")
}

/// Rules that would let almost anything through: a dot-segment path must still match none.
fn permissive_rules() -> Rules {
    Rules::from_yaml(
        r#"
routes:
  - { name: exact, path: /a/b }
  - { name: pattern, pattern: "/{x}/{y}/*" }
  - { name: admin, prefix: /admin/, scopes: [admin] }
  - { name: everything, prefix: /, public: true }
"#,
        "properties.yaml",
    )
    .unwrap()
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        prop::sample::select(KNOWN_METHODS.to_vec()),
        "[A-Za-z!#$%&'*+.^_`|~-]{1,12}".prop_map(|m| Method::from_bytes(m.as_bytes()).unwrap()),
    ]
}

/// `.`, `..` and their percent-encoded forms.
fn dot_segment() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec![".", "%2e", "%2E"]), 1..=2)
        .prop_map(|parts| parts.concat())
}

fn clean_segment() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,7}|"
}

fn yaml_text() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "routes:",
        "\n",
        "\n  - ",
        "  ",
        "- ",
        "name: ",
        "r",
        "path: ",
        "prefix: ",
        "pattern: ",
        "/",
        "/{id}/",
        "/*",
        "/a/*/b",
        "{",
        "}",
        "[",
        "]",
        ", ",
        "methods: ",
        "[GET, nope]",
        "scopes: ",
        "{ all_of: [read] }",
        "{ any_of: [] }",
        "[read, \"a b\"]",
        "public: ",
        "true",
        "false",
        "authenticated: ",
        "upstream: ",
        "\"\"",
        "~",
        "&a",
        "*a",
        "!!binary",
        "%",
        "é",
        "\t",
        "? ",
        ": ",
        "'",
        "\"",
    ]);
    prop_oneof![
        prop::collection::vec(piece, 0..40).prop_map(|p| p.concat()),
        tricky_string(),
    ]
}

// ---- properties ----

proptest! {
    #![proptest_config(config())]

    #[test]
    fn bearer_parsing_never_panics_and_tokens_are_b64tokens(
        scheme in prop::sample::select(vec!["Bearer ", "bearer", "BEARER  ", "Basic ", "", "Bearer\t"]),
        rest in prop_oneof![header_bytes(), b64token().prop_map(String::into_bytes)],
        query in prop::option::of(tricky_string()),
    ) {
        let mut value = scheme.as_bytes().to_vec();
        value.extend_from_slice(&rest);
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_bytes(&value).unwrap());
        if let Bearer::Token(t) = bearer_token(&headers, query.as_deref()) {
            let body = t.trim_end_matches('=');
            prop_assert!(!body.is_empty());
            prop_assert!(body.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)));
            let text = String::from_utf8(value).unwrap();
            prop_assert!(text.trim_matches([' ', '\t']).to_ascii_lowercase().starts_with("bearer "));
            prop_assert!(text.trim_matches([' ', '\t']).ends_with(t.as_str()));
        }
    }

    #[test]
    fn every_b64token_is_read_back(t in b64token(), pad in "[ \t]{0,3}") {
        let mut headers = HeaderMap::new();
        let value = format!("{pad}Bearer {pad}{t}{pad}");
        headers.insert(AUTHORIZATION, HeaderValue::from_str(&value).unwrap());
        prop_assert_eq!(bearer_token(&headers, None), Bearer::Token(t.clone()));
        headers.append(AUTHORIZATION, HeaderValue::from_str(&value).unwrap());
        prop_assert_eq!(bearer_token(&headers, None), Bearer::Malformed(MULTIPLE_HEADERS));
    }

    #[test]
    fn an_access_token_in_the_query_is_always_refused(
        before in "[a-z=&;]{0,12}",
        key in prop::sample::select(vec!["access_token", "access%5Ftoken", "access%5ftoken", "%61ccess_token"]),
        value in "[A-Za-z0-9=]{0,12}",
        t in b64token(),
    ) {
        let query = format!("{before}&{key}={value}");
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
        prop_assert_eq!(bearer_token(&headers, Some(&query)), Bearer::Malformed(QUERY_TOKEN));
    }

    #[test]
    fn path_matching_never_panics(method in method(), path in tricky_string()) {
        let rules = permissive_rules();
        let _ = rules.find(&method, &path);
        let _ = rules.find(&method, &format!("/{path}"));
    }

    #[test]
    fn a_path_with_a_dot_segment_matches_no_rule(
        method in method(),
        before in prop::collection::vec(clean_segment(), 0..4),
        dot in dot_segment(),
        after in prop::collection::vec(clean_segment(), 0..4),
        tail in prop::sample::select(vec!["", "/", "?a=1", "#x", "?x=/../"]),
    ) {
        let rules = permissive_rules();
        let mut segments = before.clone();
        segments.push(dot);
        segments.extend(after.iter().cloned());
        let path = format!("/{}{tail}", segments.join("/"));
        prop_assert_eq!(rules.find(&method, &path), None, "{}", path);
        // Without the dot segment, the catch-all (at least) matches: the rules are not vacuous.
        let clean = format!("/{}{tail}", before.iter().chain(&after).cloned().collect::<Vec<_>>().join("/"));
        prop_assert!(rules.find(&method, &clean).is_some(), "{}", clean);
    }

    #[test]
    fn any_yaml_text_is_loaded_or_refused_without_panic(text in yaml_text(), path in tricky_string()) {
        if let Ok(rules) = Rules::from_yaml(&text, "fuzz.yaml") {
            let _ = rules.find(&Method::GET, &format!("/{path}"));
        }
    }

    #[test]
    fn any_json_is_read_or_refused_without_panic(value in json_value()) {
        let text = value.to_string();
        let _ = Claims::from_json(text.as_bytes());
        let _ = Claims::from_value(value);
    }

    #[test]
    fn any_bytes_are_read_or_refused_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = Claims::from_json(&bytes);
        let _ = decode(&bytes);
    }

    #[test]
    fn active_answers_have_sane_times_and_lossless_identity_headers(value in answer()) {
        let Ok(claims) = Claims::from_value(value.clone()) else {
            return Ok(());
        };
        // A parsed answer reads back the same from its own JSON.
        prop_assert_eq!(Claims::from_value(serde_json::to_value(&claims).unwrap()), Ok(claims.clone()));
        if claims.active {
            for t in [claims.exp, claims.iat, claims.nbf].into_iter().flatten() {
                prop_assert!((0..=MAX_TIME).contains(&t));
            }
            let id = Identity::from_claims(&claims);
            prop_assert_eq!(read_back(&id), id);
        }
        // Only a JSON `true` is active.
        prop_assert_eq!(claims.active, value.get("active") == Some(&Value::Bool(true)));
    }

    #[test]
    fn encoding_is_lossless_and_header_safe(s in tricky_string()) {
        let e = encode(&s);
        prop_assert!(e.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        prop_assert!(HeaderValue::from_str(&e).is_ok());
        prop_assert_eq!(decode(e.as_bytes()), Some(s.clone()));
        if s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'%') {
            prop_assert_eq!(e, s);
        }
    }

    #[test]
    fn identities_round_trip_through_their_headers(id in identity()) {
        prop_assert_eq!(read_back(&id), id);
    }
}
