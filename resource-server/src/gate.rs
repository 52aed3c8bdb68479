//! The one entry point of the data path: [`Gate::authorize`] takes the matched route and the
//! request's headers, asks the deployment's [`TokenCheck`] (introspection, local JWT validation,
//! or the proxy's forwarded identity) only when the route needs a token, and answers
//! `Ok(`[`Allow`]`)` or `Err(`[`Denial`]`)`: a denial always carries its response and its
//! metrics label.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

use crate::claims::Claims;
use crate::decision::{Decision, Refusal, TokenState, decide};
use crate::identity::Identity;
use crate::rules::{Access, Route};

/// What a [`TokenCheck`] found out about a request's credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// No credentials.
    Missing,
    /// Credentials that cannot be used (400); the text is safe to show.
    Malformed(&'static str),
    /// The token's claims (an inactive answer too: [`decide`] refuses it).
    Checked(Arc<Claims>),
    /// A token that is not valid (401 `invalid_token`); the text becomes `error_description`.
    Invalid(&'static str),
    /// The check could not be made (503, fail closed): authorization server or keys unreachable.
    Unavailable,
}

/// How a deployment establishes who is calling. Three implementations: introspection
/// ([`crate::TokenChecker`], cached), local JWT validation ([`crate::jwt::JwtValidator`]) and the
/// sidecar's identity headers ([`crate::forwarded::ForwardedIdentity`]); [`JwtOrIntrospection`]
/// combines the first two.
pub trait TokenCheck: Send + Sync {
    /// Reads the request's credentials (`query`: the raw query string, without `?`).
    fn credential(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> impl Future<Output = Credential> + Send;

    /// How far past `exp`, or before `nbf`, a token is still accepted.
    fn leeway(&self) -> Duration;
}

impl<T: TokenCheck> TokenCheck for &T {
    fn credential(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> impl Future<Output = Credential> + Send {
        (**self).credential(headers, query)
    }

    fn leeway(&self) -> Duration {
        (**self).leeway()
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

/// Local JWT validation for tokens shaped like JWTs, introspection for the others (opaque tokens
/// of the same authorization server). A token shaped like a JWT that fails validation is
/// refused: it is never sent to introspection instead.
#[derive(Clone, Copy, Debug)]
pub struct JwtOrIntrospection<J, I> {
    pub jwt: J,
    pub introspection: I,
}

impl<J, I> TokenCheck for JwtOrIntrospection<J, I>
where
    J: std::ops::Deref<Target = crate::jwt::JwtValidator> + Send + Sync,
    I: std::ops::Deref<Target = crate::checker::TokenChecker> + Send + Sync,
{
    async fn credential(&self, headers: &HeaderMap, query: Option<&str>) -> Credential {
        match crate::bearer::bearer_token(headers, query) {
            crate::Bearer::Missing => Credential::Missing,
            crate::Bearer::Malformed(why) => Credential::Malformed(why),
            crate::Bearer::Token(t) if looks_like_jwt(&t) => self.jwt.validate(&t).await,
            crate::Bearer::Token(t) => self.introspection.introspect_credential(&t).await,
        }
    }

    fn leeway(&self) -> Duration {
        // Both are checked against the same clock; the larger leeway is the one in force.
        self.jwt.leeway().max(self.introspection.leeway())
    }
}

/// Which token check a deployment uses (the `token_source` setting, with its validator).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TokenSource {
    /// Introspection of every token (cached).
    #[default]
    Introspection,
    /// Local validation of JWTs only.
    Jwt(crate::jwt::JwtValidator),
    /// JWTs validated locally, other tokens introspected.
    JwtOrIntrospection(crate::jwt::JwtValidator),
}

impl TokenSource {
    /// The JWT validator, when tokens are validated locally.
    pub fn jwt(&self) -> Option<&crate::jwt::JwtValidator> {
        match self {
            TokenSource::Introspection => None,
            TokenSource::Jwt(v) | TokenSource::JwtOrIntrospection(v) => Some(v),
        }
    }
}

/// The request may go on, on this route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allow<'r> {
    pub route: &'r Route,
    /// The caller, on an authenticated route; `None` on a public one.
    pub identity: Option<Identity>,
}

/// The request is refused: the response to write and the outcome to count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub refusal: Refusal,
    pub outcome: Outcome,
}

/// The outcome of one request, as a metrics label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Allow,
    Unauthenticated,
    BadRequest,
    InvalidToken,
    InsufficientScope,
    Unavailable,
    NoRoute,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 7] = [
        Outcome::Allow,
        Outcome::Unauthenticated,
        Outcome::BadRequest,
        Outcome::InvalidToken,
        Outcome::InsufficientScope,
        Outcome::Unavailable,
        Outcome::NoRoute,
    ];

    /// The outcome of a decision.
    pub fn of(decision: &Decision) -> Outcome {
        match decision {
            Decision::Allow(_) => Outcome::Allow,
            Decision::Unauthenticated => Outcome::Unauthenticated,
            Decision::BadRequest(_) => Outcome::BadRequest,
            Decision::InvalidToken(_) => Outcome::InvalidToken,
            Decision::InsufficientScope(_) => Outcome::InsufficientScope,
            Decision::Unavailable => Outcome::Unavailable,
            Decision::NoRoute => Outcome::NoRoute,
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Unauthenticated => "unauthenticated",
            Outcome::BadRequest => "bad_request",
            Outcome::InvalidToken => "invalid_token",
            Outcome::InsufficientScope => "insufficient_scope",
            Outcome::Unavailable => "unavailable",
            Outcome::NoRoute => "no_route",
        }
    }
}

/// The access check of one deployment: a [`TokenCheck`] asked only for routes that need a token.
#[derive(Clone, Debug)]
pub struct Gate<C> {
    check: C,
}

impl<C: TokenCheck> Gate<C> {
    pub fn new(check: C) -> Self {
        Gate { check }
    }

    /// The token check.
    pub fn token_check(&self) -> &C {
        &self.check
    }

    /// The decision for one request whose route (if any) the caller's rules found. No route: 404.
    /// Public route: allowed, the credentials not looked at. Otherwise the token is checked and
    /// the route's scopes required (see [`crate::decision::decide_at`]).
    pub async fn authorize<'r>(
        &self,
        route: Option<&'r Route>,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<Allow<'r>, Denial> {
        let Some(route) = route else {
            return Err(Denial::no_route());
        };
        let allow = |identity| Allow { route, identity };
        if route.access == Access::Public {
            return decide(Some(route), TokenState::Missing, Duration::ZERO)
                .into_result()
                .map(allow);
        }
        let credential = self.check.credential(headers, query).await;
        let state = match &credential {
            Credential::Missing => TokenState::Missing,
            Credential::Malformed(why) => TokenState::Malformed(why),
            Credential::Checked(claims) => TokenState::Checked(claims),
            Credential::Invalid(why) => TokenState::Invalid(why),
            Credential::Unavailable => TokenState::Unavailable,
        };
        decide(Some(route), state, self.check.leeway())
            .into_result()
            .map(allow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Rules;

    struct Fixed(Credential);

    impl TokenCheck for Fixed {
        async fn credential(&self, _: &HeaderMap, _: Option<&str>) -> Credential {
            self.0.clone()
        }
        fn leeway(&self) -> Duration {
            Duration::ZERO
        }
    }

    /// Panics when asked: public and unmatched routes never look at the token.
    struct Untouchable;

    impl TokenCheck for Untouchable {
        async fn credential(&self, _: &HeaderMap, _: Option<&str>) -> Credential {
            panic!("the token was checked")
        }
        fn leeway(&self) -> Duration {
            Duration::ZERO
        }
    }

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

    async fn run<C: TokenCheck>(c: C, path: &str) -> Result<Allow<'static>, Denial> {
        let r: &'static Rules = Box::leak(Box::new(rules()));
        let route = r.find(&http::Method::GET, path);
        Gate::new(c).authorize(route, &HeaderMap::new(), None).await
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn public_and_unmatched_routes_never_check_the_token() {
        block_on(async {
            let allow = run(Untouchable, "/p").await.unwrap();
            assert_eq!((allow.route.name.as_str(), allow.identity), ("pub", None));
            let denial = run(Untouchable, "/nowhere").await.unwrap_err();
            assert_eq!(
                (denial.refusal.status, denial.outcome),
                (404, Outcome::NoRoute)
            );
        });
    }

    #[test]
    fn every_denial_has_its_refusal_and_label() {
        block_on(async {
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
                let denial = run(Fixed(credential.clone()), "/r").await.unwrap_err();
                assert_eq!(
                    (denial.refusal.status, denial.outcome),
                    (status, outcome),
                    "{credential:?}"
                );
            }
            let denial = run(
                Fixed(Credential::Invalid("The token's issuer is not trusted.")),
                "/r",
            )
            .await
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
            let allow = run(Fixed(claims("read")), "/r").await.unwrap();
            assert_eq!(allow.identity.unwrap().username.as_deref(), Some("alice"));
        });
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
