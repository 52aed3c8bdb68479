//! The one entry point of the data path. A [`Gate`] owns a deployment's route rules and its
//! token [`Check`], is built once from [`crate::GateSettings`] and replaced as a unit on reload;
//! [`Gate::authorize`] answers one request: `Ok(`[`Allow`]`)` or `Err(`[`Denial`]`)`, a denial
//! always carrying its response and its metrics label. With a revocation stream
//! ([`crate::ssf::Receiver`]), every checked token is screened against its deny-list; with an
//! audience ([`crate::audience`]), every checked token must be meant for this API. With a
//! `resource`, [`Gate::metadata`] answers RFC 9728 metadata requests and every challenge names
//! the metadata ([`crate::protected_resource`]).

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Uri};

use crate::audience::Audience;
use crate::bearer::{Bearer, bearer_token};
use crate::checker::TokenChecker;
use crate::client_cert::{CertThumbprint, bind, forwarded_cert};
use crate::decision::decide;
use crate::dpop_gate::{DpopCheck, ProofRequest, SeenAs, dpop_scheme_token};
use crate::forwarded::{ForwardedIdentity, ProxySecret};
use crate::gate_config::{GateSettings, TokenSource};
use crate::identity::EncodedIdentity;
use crate::jwt::JwtValidator;
use crate::protected_resource::{MetadataAnswer, ProtectedResource, ResourceSettings};
use crate::revoked::REVOKED_TOKEN;
use crate::rules::{Access, Route, Rules};
use crate::ssf::Receiver;

pub use crate::decision::{Credential, Denial, Outcome};

/// How a deployment establishes who is calling: the `token_source` setting, built.
#[derive(Clone, Debug)]
pub enum Check {
    /// Every token introspected, through the cache.
    Introspection(TokenChecker),
    /// Every token validated locally as a JWT.
    Jwt(JwtValidator),
    /// JWT-shaped tokens validated locally, any other token introspected. A token shaped like a
    /// JWT that fails validation is refused: it is never sent to introspection instead.
    JwtOrIntrospection {
        jwt: JwtValidator,
        introspection: TokenChecker,
    },
    /// The proxy's `X-Auth-*` identity headers, believed (behind-proxy mode).
    Forwarded(ForwardedIdentity),
    /// **Unsafe, benchmarks only**: nothing is checked.
    Unchecked,
}

impl Check {
    /// What the request's credentials are worth. The bearer token is parsed here, once.
    pub async fn credential(&self, headers: &HeaderMap, query: Option<&str>) -> Credential {
        let token = match self {
            Check::Forwarded(forwarded) => return forwarded.credential(headers),
            Check::Unchecked => return Credential::Unavailable,
            _ => bearer_token(headers, query),
        };
        match token {
            Bearer::Missing => Credential::Missing,
            Bearer::Malformed(why) => Credential::Malformed(why),
            Bearer::Token(t) => self.token(&t).await,
        }
    }

    /// What one bearer token is worth.
    pub async fn token(&self, token: &str) -> Credential {
        match self {
            Check::Introspection(c) => c.introspect_credential(token).await,
            Check::Jwt(v) => v.validate(token).await,
            Check::JwtOrIntrospection { jwt, .. } if looks_like_jwt(token) => {
                jwt.validate(token).await
            }
            Check::JwtOrIntrospection { introspection, .. } => {
                introspection.introspect_credential(token).await
            }
            Check::Forwarded(_) | Check::Unchecked => Credential::Missing,
        }
    }

    /// How far past `exp`, or before `nbf`, a token is still accepted. With both checks, the
    /// larger leeway is the one in force (both against the same clock).
    pub fn leeway(&self) -> Duration {
        match self {
            Check::Introspection(c) => c.leeway(),
            Check::Jwt(v) => v.leeway(),
            Check::JwtOrIntrospection { jwt, introspection } => {
                jwt.leeway().max(introspection.leeway())
            }
            Check::Forwarded(f) => f.leeway,
            Check::Unchecked => Duration::ZERO,
        }
    }

    /// The JWT validator, when tokens are validated locally.
    pub fn jwt(&self) -> Option<&JwtValidator> {
        match self {
            Check::Jwt(v) | Check::JwtOrIntrospection { jwt: v, .. } => Some(v),
            _ => None,
        }
    }

    /// The introspection client, when tokens are introspected.
    pub fn introspection(&self) -> Option<&TokenChecker> {
        match self {
            Check::Introspection(c)
            | Check::JwtOrIntrospection {
                introspection: c, ..
            } => Some(c),
            _ => None,
        }
    }
}

/// Whether a bearer token has the shape of a JWS compact serialization (three dot-separated
/// parts, the first a JSON object with a string `alg`): such tokens are validated locally, any
/// other is introspected. A header the validator refuses (a `crit` member, a `kid` or `typ` that
/// is not a string) still makes a JWT: refused here, never sent to introspection.
pub fn looks_like_jwt(token: &str) -> bool {
    use crate::jwt::header::{Header, HeaderError};
    !matches!(
        Header::parse(token),
        Err(HeaderError::NotAJwt | HeaderError::Field("alg"))
    )
}

/// The request may go on, on this route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allow<'r> {
    pub route: &'r Route,
    /// The caller, on an authenticated route; `None` on a public one (and with
    /// [`Check::Unchecked`]).
    pub identity: Option<Arc<EncodedIdentity>>,
}

/// A deployment's access check: its route rules and its token check, replaced as one.
#[derive(Clone, Debug)]
pub struct Gate {
    rules: Rules,
    check: Check,
    /// The proxy's secret, when what runs this gate stands behind the proxy: the client
    /// certificate the proxy forwards is believed with it ([`Gate::forwarded_client_cert`]).
    proxy_secret: Option<ProxySecret>,
    revocation: Option<Receiver>,
    /// What a checked token's `aud` must name one of (`None`: not checked).
    audience: Option<Audience>,
    /// This API's RFC 9728 metadata, when a `resource` is configured.
    resource: Option<Arc<ProtectedResource>>,
    /// The origin of the configured `resource`: a DPoP proof's `htu` may always name it.
    resource_origin: Option<String>,
    /// DPoP's replay cache (RFC 9449), kept across reloads.
    dpop: DpopCheck,
}

impl Gate {
    pub fn new(rules: Rules, check: Check) -> Gate {
        Gate {
            rules,
            check,
            proxy_secret: None,
            revocation: None,
            audience: None,
            resource: None,
            resource_origin: None,
            dpop: DpopCheck::default(),
        }
    }

    /// This gate, holding every checked token to `audience`.
    pub fn with_audience(self, audience: Option<Audience>) -> Gate {
        Gate { audience, ..self }
    }

    /// This gate, serving the metadata of `resource` (its scopes the rules') and naming it in
    /// every challenge.
    pub fn with_resource(self, resource: Option<&ResourceSettings>) -> Gate {
        let resource_origin = resource.and_then(|r| origin_of(&r.resource));
        let resource = resource.map(|r| Arc::new(ProtectedResource::new(r, &self.rules)));
        Gate {
            resource,
            resource_origin,
            ..self
        }
    }

    /// The gate `settings` describe. `previous` is the gate this one replaces on a reload: its
    /// introspection client (cache, metrics, outage state) is kept, since introspection settings
    /// change only on restart. JWT validators are shared by settings
    /// ([`JwtValidator::shared`]): a reload that keeps them keeps the keys and the cache. Inside
    /// a tokio runtime, a new validator's JWKS is fetched in the background at once. The
    /// revocation stream receiver is kept like the introspection client (its settings change
    /// only on restart).
    pub fn build(settings: GateSettings, previous: Option<&Gate>) -> Result<Gate, String> {
        let revocation = match previous {
            Some(g) => g.revocation.clone(),
            None => settings.revocation.clone().map(Receiver::new),
        };
        let introspection = || -> Result<TokenChecker, String> {
            let checker = match previous.and_then(|g| g.check.introspection()) {
                Some(kept) => kept.clone(),
                None => {
                    let config = settings.introspection.as_ref().ok_or(
                        "introspection: this token source needs the introspection settings",
                    )?;
                    TokenChecker::with_revocation(
                        config.settings.clone(),
                        config.cache,
                        revocation.as_ref().map(|r| r.revoked().clone()),
                    )
                    .map_err(|e| format!("introspection: {e}"))?
                }
            };
            if let Some(r) = &revocation {
                r.evict_from(&checker);
            }
            Ok(checker)
        };
        let jwt = || -> Result<JwtValidator, String> {
            let config = settings
                .jwt
                .as_ref()
                .ok_or("jwt: this token source needs the jwt settings")?;
            let validator =
                JwtValidator::shared(config.clone()).map_err(|e| format!("jwt: {e}"))?;
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let started = validator.clone();
                runtime.spawn(async move { started.start().await });
            }
            if let Some(r) = &revocation {
                r.refresh_keys_of(&validator);
            }
            Ok(validator)
        };
        let check = match settings.token_source {
            TokenSource::Introspection => Check::Introspection(introspection()?),
            TokenSource::Jwt => Check::Jwt(jwt()?),
            TokenSource::JwtOrIntrospection => Check::JwtOrIntrospection {
                jwt: jwt()?,
                introspection: introspection()?,
            },
            TokenSource::BehindProxy => Check::Forwarded(ForwardedIdentity {
                leeway: settings.leeway,
                secret: settings.proxy_secret.clone().ok_or(
                    "proxy_secret: behind_proxy believes the X-Auth-* headers only from requests \
                     that carry the proxy's secret; give it",
                )?,
            }),
            TokenSource::Unchecked => Check::Unchecked,
        };
        // The proxy's identity headers carry no audience: the proxy checked it.
        let audience = settings
            .audience
            .filter(|_| settings.token_source.checks_tokens());
        Ok(Gate {
            rules: settings.rules,
            check,
            proxy_secret: settings.proxy_secret,
            revocation,
            audience: None,
            resource: None,
            resource_origin: None,
            dpop: previous.map(|g| g.dpop.clone()).unwrap_or_default(),
        }
        .with_audience(audience)
        .with_resource(settings.resource.as_ref()))
    }

    /// The answer to a request for protected resource metadata (a path under
    /// `/.well-known/oauth-protected-resource`), given before any route is matched, with no
    /// token looked at; `None` for any other path, and for every path when no `resource` is
    /// configured (then the routes decide, and without a route for it the answer is 404).
    pub fn metadata(&self, method: &Method, path: &str) -> Option<MetadataAnswer> {
        self.resource.as_ref()?.answer(method, path)
    }

    /// This API's metadata, when a `resource` is configured.
    pub fn protected_resource(&self) -> Option<&ProtectedResource> {
        self.resource.as_deref()
    }

    /// The audiences checked tokens must name one of, if any.
    pub fn audience(&self) -> Option<&Audience> {
        self.audience.as_ref()
    }

    /// The revocation stream receiver, when there is one.
    pub fn revocation(&self) -> Option<&Receiver> {
        self.revocation.as_ref()
    }

    /// The route rules.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The token check.
    pub fn check(&self) -> &Check {
        &self.check
    }

    /// The thumbprint of the client certificate the proxy forwarded with this request, believed
    /// only with the proxy's secret (see [`crate::client_cert`]); `None` without a secret.
    pub fn forwarded_client_cert(&self, headers: &HeaderMap) -> Option<CertThumbprint> {
        let secret = self.proxy_secret.as_ref()?;
        forwarded_cert(headers, secret).map(|der| CertThumbprint::of_der(&der))
    }

    /// The decision for one request. No route: 404. Public route: allowed, the credentials not
    /// looked at. Otherwise the token is checked, held to its certificate binding (RFC 8705:
    /// `client_cert` is the thumbprint of the certificate the request came with, see
    /// [`crate::client_cert::bind`]) and the route's scopes required (see
    /// [`crate::decision::decide`]). With [`Check::Unchecked`] every routed request passes.
    pub async fn authorize(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        client_cert: Option<&CertThumbprint>,
    ) -> Result<Allow<'_>, Denial> {
        self.authorize_from(method, uri, headers, client_cert, SeenAs::Resource)
            .await
    }

    /// DPoP's replay cache and settings.
    pub fn dpop(&self) -> &DpopCheck {
        &self.dpop
    }

    /// [`Gate::authorize`] for a request whose URL as the client saw it (which a DPoP proof's
    /// `htu` names, besides the configured `resource`'s origin) is learnt as `seen` says. A
    /// token under the `DPoP` scheme, or bound to a key, is held to a proof
    /// ([`crate::dpop::gate`]).
    pub async fn authorize_from(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        client_cert: Option<&CertThumbprint>,
        seen: SeenAs,
    ) -> Result<Allow<'_>, Denial> {
        let Some(route) = self.rules.find(method, uri.path()) else {
            return Err(Denial::no_route());
        };
        if let Some(r) = &self.revocation {
            r.start();
        }
        let allow = |identity| Allow { route, identity };
        if route.access == Access::Public || matches!(self.check, Check::Unchecked) {
            return Ok(allow(None));
        }
        let dpop_token = match &self.check {
            Check::Forwarded(_) => None,
            _ => dpop_scheme_token(headers),
        };
        let mut credential = match dpop_token {
            Some(Ok(token)) => self.check.token(token).await,
            Some(Err(why)) => Credential::Malformed(why),
            None => self.check.credential(headers, uri.query()).await,
        };
        if let Some(r) = &self.revocation
            && let Credential::Checked(claims) = &credential
            && r.revoked().refuses(claims)
        {
            credential = Credential::Invalid(REVOKED_TOKEN);
        }
        if let Some(audience) = &self.audience {
            credential = audience.screen(credential);
        }
        let credential = bind(credential, client_cert);
        let request = ProofRequest {
            method,
            uri,
            headers,
            dpop_token: dpop_token.and_then(Result::ok),
            seen,
            resource_origin: self.resource_origin.as_deref(),
        };
        let credential = self.dpop.screen(credential, &request, route.dpop).await;
        let resource_metadata = self.resource.as_deref().map(ProtectedResource::url);
        decide(Some(route), &credential, self.check.leeway())
            .into_result_with(resource_metadata)
            .map(allow)
            .map_err(|denial| denial.on_route(route.index()))
    }
}

/// The origin (`scheme://authority`) of an absolute URL.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::claims::Claims;
    use crate::rules::Rules;

    fn rules() -> Rules {
        Rules::from_yaml(
            "routes:\n  - { name: pub, path: /p, public: true }\n  - { name: read, path: /r, scopes: [read] }\n",
            "t.yaml",
        )
        .unwrap()
    }

    fn claims(scope: &str) -> Credential {
        Credential::Checked(Arc::new(Claims {
            active: true,
            scope: Some(scope.into()),
            username: Some("alice".into()),
            ..Claims::default()
        }))
    }

    /// The gate's decision for `credential` on the route of `path`, as the checks would give it.
    fn decide_path(
        credential: &Credential,
        path: &str,
    ) -> Result<Option<Arc<EncodedIdentity>>, Denial> {
        let r = rules();
        let route = r.find(&Method::GET, path);
        if route.is_none() {
            return Err(Denial::no_route());
        }
        decide(route, credential, Duration::ZERO).into_result()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn public_and_unmatched_routes_never_check_the_token() {
        // A forwarded-identity gate with headers that would be refused as malformed: a public
        // route never looks at them, an unmatched one is 404 before they are read.
        let gate = Gate::new(
            rules(),
            Check::Forwarded(ForwardedIdentity {
                leeway: Duration::ZERO,
                secret: crate::ProxySecret::new(&"s".repeat(32)).unwrap(),
            }),
        );
        let mut headers = HeaderMap::new();
        headers.insert("x-auth-username", "a b".parse().unwrap());
        headers.insert(
            crate::forwarded::PROXY_SECRET_HEADER,
            "s".repeat(32).parse().unwrap(),
        );
        block_on(async {
            let allow = gate
                .authorize(&Method::GET, &"/p".parse().unwrap(), &headers, None)
                .await
                .unwrap();
            assert_eq!((allow.route.name.as_str(), allow.identity), ("pub", None));
            let denial = gate
                .authorize(&Method::GET, &"/nowhere".parse().unwrap(), &headers, None)
                .await
                .unwrap_err();
            assert_eq!(
                (denial.refusal.status, denial.outcome),
                (404, Outcome::NoRoute)
            );
            assert_eq!(denial.route, None, "a 404 names no route");
            let denial = gate
                .authorize(&Method::GET, &"/r".parse().unwrap(), &headers, None)
                .await
                .unwrap_err();
            assert_eq!(denial.outcome, Outcome::BadRequest);
            assert_eq!(
                denial.route,
                Some(1),
                "a refusal names the route it was decided on"
            );
        });
    }

    #[test]
    fn the_forwarded_client_certificate_is_believed_with_the_proxy_secret_only() {
        use crate::client_cert::{CLIENT_CERT_HEADER, escaped_pem};
        let der = b"a certificate".to_vec();
        let mut headers = HeaderMap::new();
        headers.insert(CLIENT_CERT_HEADER, escaped_pem(&der).parse().unwrap());
        headers.insert(
            crate::forwarded::PROXY_SECRET_HEADER,
            "s".repeat(32).parse().unwrap(),
        );
        // A gate that stands behind no proxy believes no forwarded certificate.
        assert_eq!(
            Gate::new(rules(), Check::Unchecked).forwarded_client_cert(&headers),
            None
        );
        let mut gate = Gate::new(rules(), Check::Unchecked);
        gate.proxy_secret = Some(ProxySecret::new(&"s".repeat(32)).unwrap());
        assert_eq!(
            gate.forwarded_client_cert(&headers),
            Some(CertThumbprint::of_der(&der))
        );
        headers.insert(
            crate::forwarded::PROXY_SECRET_HEADER,
            "t".repeat(32).parse().unwrap(),
        );
        assert_eq!(gate.forwarded_client_cert(&headers), None);
    }

    #[test]
    fn an_unchecked_gate_lets_routed_requests_through_and_still_answers_404() {
        let gate = Gate::new(rules(), Check::Unchecked);
        block_on(async {
            let allow = gate
                .authorize(
                    &Method::GET,
                    &"/r".parse().unwrap(),
                    &HeaderMap::new(),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(allow.identity, None);
            let denial = gate
                .authorize(
                    &Method::GET,
                    &"/x".parse().unwrap(),
                    &HeaderMap::new(),
                    None,
                )
                .await
                .unwrap_err();
            assert_eq!(denial.outcome, Outcome::NoRoute);
        });
    }

    #[test]
    fn every_denial_has_its_refusal_and_label() {
        let cases = [
            (Credential::Missing, 401, Outcome::Unauthenticated),
            (Credential::Malformed("x"), 400, Outcome::BadRequest),
            (Credential::Invalid("bad"), 401, Outcome::InvalidToken),
            (Credential::Unavailable, 503, Outcome::Unavailable),
            (claims("write"), 403, Outcome::InsufficientScope),
            (
                Credential::Checked(Arc::new(Claims::inactive())),
                401,
                Outcome::InvalidToken,
            ),
        ];
        for (credential, status, outcome) in cases {
            let denial = decide_path(&credential, "/r").unwrap_err();
            assert_eq!(
                (denial.refusal.status, denial.outcome),
                (status, outcome),
                "{credential:?}"
            );
        }
        let denial = decide_path(
            &Credential::Invalid("The token's issuer is not trusted."),
            "/r",
        )
        .unwrap_err();
        assert!(
            denial
                .refusal
                .www_authenticate
                .as_deref()
                .unwrap()
                .contains("error=\"invalid_token\", error_description=\"The token's issuer is not trusted.\""),
            "{denial:?}"
        );
        let identity = decide_path(&claims("read"), "/r").unwrap().unwrap();
        assert_eq!(identity.username.as_deref(), Some("alice"));
    }

    #[test]
    fn shapes_of_jwts() {
        assert!(looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.e30.c2ln"));
        for opaque in [
            "abc",
            "a.b.c",
            "e30.e30.c2ln",
            "eyJhbGciOiJSUzI1NiJ9.e30",
            "",
        ] {
            assert!(!looks_like_jwt(opaque), "{opaque}");
        }
        // Headers the validator refuses are still JWTs: refused locally, not introspected.
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        for header in [
            r#"{"alg":"RS256","crit":["exp"]}"#,
            r#"{"alg":"RS256","kid":7}"#,
            r#"{"alg":"RS256","typ":["at+jwt"]}"#,
        ] {
            assert!(
                looks_like_jwt(&format!("{}.e30.c2ln", b64(header))),
                "{header}"
            );
        }
    }
}
