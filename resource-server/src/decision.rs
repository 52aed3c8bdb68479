//! The allow/deny decision: a pure function of the matched route and the token's state, and the
//! refusal (status, `WWW-Authenticate`, JSON body) each denial is answered with.

use std::sync::Arc;
use std::time::Duration;

use crate::claims::Claims;
use crate::identity::EncodedIdentity;
use crate::rules::{Access, Route};

/// What the deployment's check found out about a request's credentials: the one input of the
/// decision besides the route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// No credentials.
    Missing,
    /// Credentials that cannot be used (400; see [`crate::bearer::Bearer::Malformed`]); the text
    /// is safe to show.
    Malformed(&'static str),
    /// The token's claims (an inactive answer too: [`decide`] refuses it).
    Checked(Arc<Claims>),
    /// A token found invalid before any claims could be trusted (e.g. a JWT whose signature or
    /// issuer does not hold); the text becomes `error_description`.
    Invalid(&'static str),
    /// The check could not be made (503, fail closed): authorization server or keys unreachable.
    Unavailable,
    /// Refused by DPoP (RFC 9449 §7): a 401 with a `DPoP` challenge of this error
    /// (`invalid_dpop_proof` or `invalid_token`) and description.
    Dpop(DpopRefusal),
}

/// Why DPoP refused a request: its `error` code and `error_description`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DpopRefusal {
    pub error: &'static str,
    pub description: &'static str,
}

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Forward it; with the caller's identity on authenticated routes, `None` on public ones.
    Allow(Option<Arc<EncodedIdentity>>),
    /// 401: no credentials on a protected route; the scopes it needs (space-separated, the
    /// challenge's `scope` hint; empty: any token).
    Unauthenticated(String),
    /// 400: malformed credentials on a protected route.
    BadRequest(&'static str),
    /// 401: inactive (unknown, expired, revoked) token; the text becomes `error_description`.
    InvalidToken(&'static str),
    /// 403: the token lacks scopes; the required scopes, space-separated.
    InsufficientScope(String),
    /// 403: the caller is in none of the route's `groups_any`.
    NotInGroup,
    /// 401 (RFC 9470): the user's sign-in is not of a class the route's `acr_values` name, or
    /// older than its `max_age`; what the route requires goes into the challenge.
    InsufficientUserAuthentication(Box<StepUp>),
    /// 503: the authorization server could not be reached (fail closed).
    Unavailable,
    /// 404: no route matched (denied by default, without saying why).
    NoRoute,
    /// 401 with a `DPoP` challenge (RFC 9449 §7.1).
    Dpop(DpopRefusal),
}

/// What a route requires of the user's sign-in, and why a token fell short (RFC 9470).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepUp {
    /// The route's `acr_values`, space-separated (empty: none required).
    pub acr_values: String,
    /// The route's `max_age`.
    pub max_age: Option<i64>,
    /// `error_description`.
    pub description: &'static str,
}

/// The request is refused: the response to write and the outcome to count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub refusal: Refusal,
    pub outcome: Outcome,
    /// The position of the route it was decided on (`None`: no route matched).
    pub route: Option<usize>,
}

/// The outcome of one request, as a metrics label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Allow,
    Unauthenticated,
    BadRequest,
    InvalidToken,
    InsufficientScope,
    NotInGroup,
    Unavailable,
    NoRoute,
    /// A CORS preflight answered by the proxy (no token looked at).
    Preflight,
    /// A sign-in too weak or too old for the route (RFC 9470).
    InsufficientUserAuthentication,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 10] = [
        Outcome::Allow,
        Outcome::Unauthenticated,
        Outcome::BadRequest,
        Outcome::InvalidToken,
        Outcome::InsufficientScope,
        Outcome::NotInGroup,
        Outcome::Unavailable,
        Outcome::NoRoute,
        Outcome::Preflight,
        Outcome::InsufficientUserAuthentication,
    ];

    /// The outcome of a decision.
    pub fn of(decision: &Decision) -> Outcome {
        match decision {
            Decision::Allow(_) => Outcome::Allow,
            Decision::Unauthenticated(_) => Outcome::Unauthenticated,
            Decision::BadRequest(_) => Outcome::BadRequest,
            Decision::InvalidToken(_) | Decision::Dpop(_) => Outcome::InvalidToken,
            Decision::InsufficientScope(_) => Outcome::InsufficientScope,
            Decision::NotInGroup => Outcome::NotInGroup,
            Decision::InsufficientUserAuthentication(_) => Outcome::InsufficientUserAuthentication,
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
            Outcome::NotInGroup => "not_in_group",
            Outcome::Unavailable => "unavailable",
            Outcome::NoRoute => "no_route",
            Outcome::Preflight => "preflight",
            Outcome::InsufficientUserAuthentication => "insufficient_user_authentication",
        }
    }
}

/// `error_description` for a token the authorization server calls inactive.
pub const INACTIVE_TOKEN: &str = "The access token is invalid, expired or revoked.";
/// `error_description` for a token reported active but whose `exp` has passed.
pub const EXPIRED_TOKEN: &str = "The access token expired.";
/// `error_description` for a token reported active but whose `nbf` is still to come.
pub const NOT_YET_VALID_TOKEN: &str = "The access token is not valid yet.";
/// `error_description` for a caller in none of a route's `groups_any`.
pub const NOT_IN_GROUP: &str = "The caller is not in a group this route requires.";
/// `error_description` for a sign-in of a class the route does not accept (RFC 9470 §3).
pub const ACR_NOT_MET: &str = "A different authentication level is required.";
/// `error_description` for a sign-in older than the route's `max_age` (RFC 9470 §3).
pub const AUTH_TOO_OLD: &str = "More recent authentication is required.";
/// The realm in every `WWW-Authenticate` challenge.
pub const REALM: &str = "api";
/// A denial as it is written to the client: `Content-Type: application/json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub www_authenticate: Option<String>,
    /// JSON, `{"detail": ...}`.
    pub body: String,
}

impl Refusal {
    /// The content type of [`Refusal::body`].
    pub const CONTENT_TYPE: &'static str = "application/json";

    /// The refusal for a gRPC client: its status code (`grpc-status`: 16 UNAUTHENTICATED for
    /// 401, 7 PERMISSION_DENIED for 403, 14 UNAVAILABLE for 503, 12 UNIMPLEMENTED for 404, 3
    /// INVALID_ARGUMENT for 400) and the body's detail as `grpc-message`, percent-encoded as
    /// the gRPC protocol spells it.
    pub fn grpc(&self) -> (u8, String) {
        let code = match self.status {
            400 => 3,
            401 => 16,
            403 => 7,
            404 => 12,
            503 => 14,
            _ => 2, // UNKNOWN
        };
        let detail = serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["detail"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut message = String::with_capacity(detail.len());
        for b in detail.bytes() {
            if (0x20..=0x7e).contains(&b) && b != b'%' {
                message.push(b as char);
            } else {
                message.push_str(&format!("%{b:02X}"));
            }
        }
        (code, message)
    }
}

impl Decision {
    /// The response for a denial; `None` for [`Decision::Allow`]. See [`Decision::into_result`].
    pub fn refusal(&self) -> Option<Refusal> {
        self.clone().into_result().err().map(|d| d.refusal)
    }

    /// `Ok` with the identity to forward (`None` on a public route), or the [`Denial`]: its
    /// response (status, `WWW-Authenticate`, JSON body) and its metrics label. See
    /// [`Decision::into_result_with`].
    pub fn into_result(self) -> Result<Option<Arc<EncodedIdentity>>, Denial> {
        self.into_result_with(None)
    }

    /// [`Decision::into_result`], every challenge naming the resource's metadata URL when there
    /// is one (`resource_metadata`, RFC 9728 §5.1). The one place challenges are written:
    /// `Bearer realm="api"`, then `error`, `error_description` and `scope` as the refusal has
    /// them (RFC 6750 §3; `scope` also on the 401 for a missing token, when the route needs
    /// scopes), then `resource_metadata`.
    pub fn into_result_with(
        self,
        resource_metadata: Option<&str>,
    ) -> Result<Option<Arc<EncodedIdentity>>, Denial> {
        let outcome = Outcome::of(&self);
        let challenge = |params: &[(&str, &str)]| Some(challenge(params, resource_metadata));
        let (status, challenge, detail) = match &self {
            Decision::Allow(identity) => return Ok(identity.clone()),
            Decision::Unauthenticated(scope) if scope.is_empty() => (
                401,
                challenge(&[]),
                "Authentication credentials were not provided.",
            ),
            Decision::Unauthenticated(scope) => (
                401,
                challenge(&[("scope", scope)]),
                "Authentication credentials were not provided.",
            ),
            Decision::BadRequest(reason) => {
                (400, challenge(&[("error", "invalid_request")]), *reason)
            }
            Decision::InvalidToken(reason) => (
                401,
                challenge(&[("error", "invalid_token"), ("error_description", reason)]),
                "Invalid token.",
            ),
            Decision::InsufficientScope(scope) => (
                403,
                challenge(&[("error", "insufficient_scope"), ("scope", scope)]),
                "You do not have permission to perform this action.",
            ),
            Decision::NotInGroup => (
                403,
                challenge(&[
                    ("error", "insufficient_scope"),
                    ("error_description", NOT_IN_GROUP),
                ]),
                "You do not have permission to perform this action.",
            ),
            Decision::InsufficientUserAuthentication(step_up) => {
                let max_age = step_up.max_age.map(|m| m.to_string());
                let mut params = vec![
                    ("error", "insufficient_user_authentication"),
                    ("error_description", step_up.description),
                ];
                if !step_up.acr_values.is_empty() {
                    params.push(("acr_values", step_up.acr_values.as_str()));
                }
                if let Some(max_age) = &max_age {
                    params.push(("max_age", max_age.as_str()));
                }
                (
                    401,
                    challenge(&params),
                    "A stronger or more recent sign-in is required.",
                )
            }
            Decision::Unavailable => (503, None, "Authorization server unavailable."),
            Decision::Dpop(refusal) => (
                401,
                Some(crate::dpop::challenge(
                    refusal.error,
                    Some(refusal.description),
                )),
                if refusal.error == crate::dpop::INVALID_DPOP_PROOF {
                    "Invalid DPoP proof."
                } else {
                    "Invalid token."
                },
            ),
            Decision::NoRoute => return Err(Denial::no_route()),
        };
        Err(Denial::new(outcome, status, challenge, detail))
    }

    /// Whether the request may go on.
    pub fn is_allow(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }
}

impl Denial {
    fn new(outcome: Outcome, status: u16, challenge: Option<String>, detail: &str) -> Denial {
        Denial {
            refusal: Refusal {
                status,
                www_authenticate: challenge,
                body: serde_json::json!({ "detail": detail }).to_string(),
            },
            outcome,
            route: None,
        }
    }

    /// This denial, decided on the route at `index` of its rules.
    pub fn on_route(self, index: usize) -> Denial {
        Denial {
            route: Some(index),
            ..self
        }
    }

    /// 404 for a request no route matches (denied by default, without saying why).
    pub fn no_route() -> Denial {
        Denial::new(Outcome::NoRoute, 404, None, "Not found.")
    }
}

/// A `Bearer` challenge: the realm, `params` (each value quoted), then `resource_metadata` when
/// given.
fn challenge(params: &[(&str, &str)], resource_metadata: Option<&str>) -> String {
    let mut out = format!("Bearer realm={}", quote(REALM));
    let metadata = resource_metadata.map(|url| ("resource_metadata", url));
    for (name, value) in params.iter().copied().chain(metadata) {
        out.push_str(", ");
        out.push_str(name);
        out.push('=');
        out.push_str(&quote(value));
    }
    out
}

/// An RFC 7230 quoted-string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        if !c.is_control() {
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// Decides with the current time; see [`decide_at`].
pub fn decide(route: Option<&Route>, token: &Credential, leeway: Duration) -> Decision {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    decide_at(route, token, now, leeway)
}

/// The decision, given the time `now` (unix seconds) against which `exp` and `nbf` are checked,
/// each with `leeway` (whole seconds; see [`crate::policy::AnswerPolicy::leeway`]).
///
/// No route → `NoRoute`. Public route → `Allow(None)` whatever the token. Otherwise: no token →
/// `Unauthenticated`; malformed → `BadRequest`; server unreachable → `Unavailable`; inactive,
/// expired (`exp + leeway <= now`) or not yet valid (`nbf - leeway > now`) → `InvalidToken`;
/// missing scopes → `InsufficientScope` (all required scopes: `all_of` then `any_of`); in none of
/// the route's `groups_any` → `NotInGroup`; an `acr` not among the route's `acr_values` or an
/// `auth_time` older than its `max_age` → `InsufficientUserAuthentication` (RFC 9470); else
/// `Allow(Some(identity))`.
pub fn decide_at(
    route: Option<&Route>,
    token: &Credential,
    now: i64,
    leeway: Duration,
) -> Decision {
    let Some(route) = route else {
        return Decision::NoRoute;
    };
    let (all_of, any_of) = match &route.access {
        Access::Public => return Decision::Allow(None),
        Access::Authenticated { all_of, any_of } => (all_of, any_of),
    };
    let claims = match token {
        Credential::Missing => return Decision::Unauthenticated(required_scopes(all_of, any_of)),
        Credential::Malformed(reason) => return Decision::BadRequest(reason),
        Credential::Unavailable => return Decision::Unavailable,
        Credential::Invalid(reason) => return Decision::InvalidToken(reason),
        Credential::Dpop(refusal) => return Decision::Dpop(*refusal),
        Credential::Checked(c) => c,
    };
    if !claims.active {
        return Decision::InvalidToken(INACTIVE_TOKEN);
    }
    let leeway = i64::try_from(leeway.as_secs()).unwrap_or(i64::MAX);
    if claims.is_expired_at(now.saturating_sub(leeway)) {
        return Decision::InvalidToken(EXPIRED_TOKEN);
    }
    if claims.is_not_yet_valid_at(now.saturating_add(leeway)) {
        return Decision::InvalidToken(NOT_YET_VALID_TOKEN);
    }
    let all_ok = all_of.iter().all(|s| claims.has_scope(s));
    let any_ok = any_of.is_empty() || any_of.iter().any(|s| claims.has_scope(s));
    if !(all_ok && any_ok) {
        return Decision::InsufficientScope(required_scopes(all_of, any_of));
    }
    if !route.groups_any.is_empty() && !claims.in_any_group(&route.groups_any) {
        return Decision::NotInGroup;
    }
    if let Some(description) = step_up_needed(route, claims, now) {
        return Decision::InsufficientUserAuthentication(Box::new(StepUp {
            acr_values: route.acr_values.join(" "),
            max_age: route.max_age,
            description,
        }));
    }
    Decision::Allow(Some(claims.identity()))
}

/// Why the token's sign-in falls short of the route's `acr_values` and `max_age`, if it does: an
/// `acr` not among them (or none), or an `auth_time` more than `max_age` seconds before `now`
/// (or none).
fn step_up_needed(route: &Route, claims: &Claims, now: i64) -> Option<&'static str> {
    let acr_ok = route.acr_values.is_empty()
        || claims
            .acr
            .as_ref()
            .is_some_and(|acr| route.acr_values.contains(acr));
    if !acr_ok {
        return Some(ACR_NOT_MET);
    }
    match (route.max_age, claims.auth_time) {
        (None, _) => None,
        (Some(max_age), Some(at)) if now.saturating_sub(at) <= max_age => None,
        (Some(_), _) => Some(AUTH_TOO_OLD),
    }
}

/// The scopes a route needs, space-separated: `all_of` then `any_of` (the challenge's `scope`).
fn required_scopes(all_of: &[String], any_of: &[String]) -> String {
    let required: Vec<&str> = all_of.iter().chain(any_of).map(String::as_str).collect();
    required.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;
    use crate::rules::Rules;

    const NOW: i64 = 1_700_000_000;

    fn checked(c: &Claims) -> Credential {
        Credential::Checked(Arc::new(c.clone()))
    }

    fn rules() -> Rules {
        Rules::from_yaml(
            r#"
routes:
  - { name: public, path: /public, public: true }
  - { name: any-token, path: /any }
  - { name: all, path: /all, scopes: { all_of: [read, write] } }
  - { name: any, path: /anyof, scopes: { any_of: [groups, admin] } }
  - { name: both, path: /both, scopes: { all_of: [read], any_of: [groups, admin] } }
"#,
            "test.yaml",
        )
        .unwrap()
    }

    fn route<'a>(r: &'a Rules, name: &str) -> &'a Route {
        r.routes().iter().find(|r| r.name == name).unwrap()
    }

    fn active(scope: &str) -> Claims {
        Claims {
            active: true,
            scope: Some(scope.into()),
            client_id: Some("app".into()),
            username: Some("alice".into()),
            exp: Some(NOW + 60),
            ..Claims::default()
        }
    }

    fn allow(scope: &str) -> Decision {
        Decision::Allow(Some(
            Identity {
                username: Some("alice".into()),
                client_id: Some("app".into()),
                scope: scope.into(),
                exp: Some(NOW + 60),
                groups: Vec::new(),
            }
            .encoded(),
        ))
    }

    /// RFC 9470: a route with `acr_values` and `max_age` refuses a password sign-in and an old
    /// one with 401 `insufficient_user_authentication`, naming what it needs; a fresh two-factor
    /// sign-in passes; scopes are checked first.
    #[test]
    fn acr_values_and_max_age_ask_for_a_step_up() {
        let r = Rules::from_yaml(
            "routes:\n  - { name: admin, path: /admin, scopes: [read], acr_values: [urn:tokengate:acr:mfa], max_age: 600 }\n  - { name: fresh, path: /fresh, max_age: 60 }\n",
            "t.yaml",
        )
        .unwrap();
        let with = |acr: Option<&str>, auth_time: Option<i64>| Claims {
            acr: acr.map(str::to_owned),
            auth_time,
            ..active("read")
        };
        let decide = |name: &str, c: &Claims| {
            decide_at(Some(route(&r, name)), &checked(c), NOW, Duration::ZERO)
        };
        let mfa = "urn:tokengate:acr:mfa";
        assert!(decide("admin", &with(Some(mfa), Some(NOW - 600))).is_allow());
        let refused = decide("admin", &with(Some("urn:tokengate:acr:pwd"), Some(NOW)));
        assert_eq!(
            Outcome::of(&refused),
            Outcome::InsufficientUserAuthentication
        );
        let refusal = refused.refusal().unwrap();
        assert_eq!(refusal.status, 401);
        assert_eq!(
            refusal.www_authenticate.as_deref(),
            Some(
                "Bearer realm=\"api\", error=\"insufficient_user_authentication\", error_description=\"A different authentication level is required.\", acr_values=\"urn:tokengate:acr:mfa\", max_age=\"600\""
            )
        );
        assert_eq!(refusal.grpc().0, 16);
        for (claims, description) in [
            (with(None, Some(NOW)), ACR_NOT_MET),
            (with(Some(mfa), Some(NOW - 601)), AUTH_TOO_OLD),
            (with(Some(mfa), None), AUTH_TOO_OLD),
        ] {
            match decide("admin", &claims) {
                Decision::InsufficientUserAuthentication(s) => {
                    assert_eq!(s.description, description)
                }
                other => panic!("{other:?}"),
            }
        }
        // Scopes first: a step-up would not give them.
        let no_scope = Claims {
            scope: Some("write".into()),
            ..with(None, None)
        };
        assert!(matches!(
            decide("admin", &no_scope),
            Decision::InsufficientScope(_)
        ));
        // max_age alone: any acr, and the challenge names no acr_values.
        assert!(decide("fresh", &with(None, Some(NOW - 60))).is_allow());
        let stale = decide("fresh", &with(Some(mfa), Some(NOW - 61)));
        assert_eq!(
            stale.refusal().unwrap().www_authenticate.as_deref(),
            Some(
                "Bearer realm=\"api\", error=\"insufficient_user_authentication\", error_description=\"More recent authentication is required.\", max_age=\"60\""
            )
        );
        let public = Rules::from_yaml(
            "routes:\n  - { name: p, path: /p, public: true, acr_values: [x] }\n",
            "t.yaml",
        );
        assert!(public.unwrap_err().to_string().contains("acr_values"));
    }

    #[test]
    fn groups_any_needs_one_of_the_groups_after_the_scopes() {
        let r = Rules::from_yaml(
            "routes:\n  - { name: admin, path: /admin, scopes: [read], groups_any: [admins, ops team] }\n",
            "t.yaml",
        )
        .unwrap();
        let route = Some(&r.routes()[0]);
        let with = |scope: &str, groups: &[&str]| Claims {
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..active(scope)
        };
        let decide = |c: &Claims| decide_at(route, &checked(c), NOW, Duration::ZERO);
        for groups in [&["admins"][..], &["x", "ops team"]] {
            let Decision::Allow(Some(id)) = decide(&with("read", groups)) else {
                panic!("{groups:?} refused")
            };
            assert_eq!(id.groups, groups);
        }
        for groups in [&[][..], &["Admins"], &["ops"], &["admins2"]] {
            assert_eq!(
                decide(&with("read", groups)),
                Decision::NotInGroup,
                "{groups:?}"
            );
        }
        // The scopes are asked first: a member without the scope lacks the scope.
        assert_eq!(
            decide(&with("write", &["admins"])),
            Decision::InsufficientScope("read".into())
        );
        let refusal = Decision::NotInGroup.refusal().unwrap();
        assert_eq!(refusal.status, 403);
        assert!(refusal.www_authenticate.unwrap().contains("not in a group"));
        assert_eq!(Outcome::of(&Decision::NotInGroup).as_str(), "not_in_group");
        // A public route takes no groups.
        let public = Rules::from_yaml(
            "routes:\n  - { name: p, path: /p, public: true, groups_any: [admins] }\n",
            "t.yaml",
        );
        assert!(public.unwrap_err().to_string().contains("groups_any"));
    }

    #[test]
    fn no_route_is_denied_whatever_the_token() {
        let c = active("read");
        for t in [
            &Credential::Missing,
            &Credential::Malformed("x"),
            &checked(&c),
            &Credential::Unavailable,
        ] {
            assert_eq!(decide_at(None, t, NOW, Duration::ZERO), Decision::NoRoute);
        }
    }

    #[test]
    fn public_route_allows_whatever_the_token() {
        let r = rules();
        let good = active("read");
        let bad = Claims::inactive();
        for t in [
            &Credential::Missing,
            &Credential::Malformed("x"),
            &checked(&good),
            &checked(&bad),
            &Credential::Unavailable,
        ] {
            assert_eq!(
                decide_at(Some(route(&r, "public")), t, NOW, Duration::ZERO),
                Decision::Allow(None)
            );
        }
    }

    #[test]
    fn protected_routes_without_usable_token() {
        let r = rules();
        let inactive = Claims::inactive();
        let mut expired = active("read write groups");
        expired.exp = Some(NOW);
        for (name, needed) in [
            ("any-token", ""),
            ("all", "read write"),
            ("any", "groups admin"),
            ("both", "read groups admin"),
        ] {
            let rt = Some(route(&r, name));
            assert_eq!(
                decide_at(rt, &Credential::Missing, NOW, Duration::ZERO),
                Decision::Unauthenticated(needed.into())
            );
            assert_eq!(
                decide_at(
                    rt,
                    &Credential::Malformed("Empty bearer token."),
                    NOW,
                    Duration::ZERO
                ),
                Decision::BadRequest("Empty bearer token.")
            );
            assert_eq!(
                decide_at(rt, &Credential::Unavailable, NOW, Duration::ZERO),
                Decision::Unavailable
            );
            assert_eq!(
                decide_at(rt, &checked(&inactive), NOW, Duration::ZERO),
                Decision::InvalidToken(INACTIVE_TOKEN)
            );
            assert_eq!(
                decide_at(rt, &checked(&expired), NOW, Duration::ZERO),
                Decision::InvalidToken(EXPIRED_TOKEN)
            );
            // An inactive answer stays inactive even with scopes and a future exp.
            let mut revoked = active("read write groups admin");
            revoked.active = false;
            assert_eq!(
                decide_at(rt, &checked(&revoked), NOW, Duration::ZERO),
                Decision::InvalidToken(INACTIVE_TOKEN)
            );
        }
    }

    #[test]
    fn scope_rules() {
        let r = rules();
        let cases: &[(&str, &str, Option<&str>)] = &[
            // (route, granted, Some(required) when refused)
            ("any-token", "", None),
            ("any-token", "whatever", None),
            ("all", "read write", None),
            ("all", "write read extra", None),
            ("all", "read", Some("read write")),
            ("all", "write", Some("read write")),
            ("all", "", Some("read write")),
            ("all", "readwrite", Some("read write")),
            ("any", "groups", None),
            ("any", "admin", None),
            ("any", "groups admin", None),
            ("any", "read", Some("groups admin")),
            ("any", "", Some("groups admin")),
            ("both", "read groups", None),
            ("both", "admin read", None),
            ("both", "read", Some("read groups admin")),
            ("both", "groups", Some("read groups admin")),
            ("both", "", Some("read groups admin")),
        ];
        for (name, granted, refused) in cases {
            let c = active(granted);
            let got = decide_at(Some(route(&r, name)), &checked(&c), NOW, Duration::ZERO);
            let want = match refused {
                None => allow(&granted.split_whitespace().collect::<Vec<_>>().join(" ")),
                Some(req) => Decision::InsufficientScope((*req).to_owned()),
            };
            assert_eq!(got, want, "{name} with {granted:?}");
        }
    }

    #[test]
    fn token_without_exp_or_identity() {
        let r = rules();
        let c = Claims {
            active: true,
            ..Claims::default()
        };
        assert_eq!(
            decide_at(
                Some(route(&r, "any-token")),
                &checked(&c),
                NOW,
                Duration::ZERO
            ),
            Decision::Allow(Some(Identity::default().encoded()))
        );
        // `decide` uses the real clock: an exp far in the future is fine.
        let mut c = active("read write");
        c.exp = Some(i64::MAX);
        assert!(decide(Some(route(&r, "all")), &checked(&c), Duration::ZERO).is_allow());
        c.exp = Some(1);
        assert_eq!(
            decide(Some(route(&r, "all")), &checked(&c), Duration::ZERO),
            Decision::InvalidToken(EXPIRED_TOKEN)
        );
    }

    fn refusal(d: Decision) -> (u16, Option<String>, serde_json::Value) {
        let r = d.refusal().expect("a refusal");
        (
            r.status,
            r.www_authenticate,
            serde_json::from_str(&r.body).expect("json body"),
        )
    }

    #[test]
    fn refusals() {
        assert_eq!(Decision::Allow(None).refusal(), None);
        assert_eq!(allow("read").refusal(), None);
        assert_eq!(
            refusal(Decision::Unauthenticated(String::new())),
            (
                401,
                Some(r#"Bearer realm="api""#.into()),
                serde_json::json!({"detail": "Authentication credentials were not provided."})
            )
        );
        assert_eq!(
            refusal(Decision::Unauthenticated("read write".into())).1,
            Some(r#"Bearer realm="api", scope="read write""#.into()),
        );
        assert_eq!(
            refusal(Decision::InvalidToken(INACTIVE_TOKEN)),
            (
                401,
                Some(r#"Bearer realm="api", error="invalid_token", error_description="The access token is invalid, expired or revoked.""#.into()),
                serde_json::json!({"detail": "Invalid token."})
            )
        );
        assert_eq!(
            refusal(Decision::InsufficientScope("read write".into())),
            (
                403,
                Some(
                    r#"Bearer realm="api", error="insufficient_scope", scope="read write""#.into()
                ),
                serde_json::json!({"detail": "You do not have permission to perform this action."})
            )
        );
        assert_eq!(
            refusal(Decision::BadRequest("Empty bearer token.")),
            (
                400,
                Some(r#"Bearer realm="api", error="invalid_request""#.into()),
                serde_json::json!({"detail": "Empty bearer token."})
            )
        );
        assert_eq!(
            refusal(Decision::Unavailable),
            (
                503,
                None,
                serde_json::json!({"detail": "Authorization server unavailable."})
            )
        );
        assert_eq!(
            refusal(Decision::NoRoute),
            (404, None, serde_json::json!({"detail": "Not found."}))
        );
        // Exact bodies, as other crates may compare them byte for byte.
        assert_eq!(
            Decision::NoRoute.refusal().unwrap().body,
            r#"{"detail":"Not found."}"#
        );
    }

    #[test]
    fn every_challenge_names_the_resource_metadata_last() {
        let url = "https://api.example/.well-known/oauth-protected-resource/orders";
        let with = |d: Decision| {
            d.into_result_with(Some(url))
                .unwrap_err()
                .refusal
                .www_authenticate
        };
        let named = format!("resource_metadata=\"{url}\"");
        assert_eq!(
            with(Decision::Unauthenticated("read".into())).unwrap(),
            format!("Bearer realm=\"api\", scope=\"read\", {named}")
        );
        assert_eq!(
            with(Decision::Unauthenticated(String::new())).unwrap(),
            format!("Bearer realm=\"api\", {named}")
        );
        assert_eq!(
            with(Decision::InvalidToken(
                "The access token is not meant for this API."
            ))
            .unwrap(),
            format!(
                "Bearer realm=\"api\", error=\"invalid_token\", error_description=\"The access \
                 token is not meant for this API.\", {named}"
            )
        );
        assert_eq!(
            with(Decision::InsufficientScope("write".into())).unwrap(),
            format!("Bearer realm=\"api\", error=\"insufficient_scope\", scope=\"write\", {named}")
        );
        for d in [Decision::BadRequest("x"), Decision::NotInGroup] {
            assert!(with(d).unwrap().ends_with(&named));
        }
        // No challenge where there was none.
        assert_eq!(with(Decision::Unavailable), None);
        assert_eq!(with(Decision::NoRoute), None);
    }

    #[test]
    fn challenge_values_are_quoted_safely() {
        let r = Decision::InsufficientScope("a\"b\\c\r\n".into())
            .refusal()
            .unwrap();
        assert_eq!(
            r.www_authenticate.as_deref(),
            Some(r#"Bearer realm="api", error="insufficient_scope", scope="a\"b\\c""#)
        );
        assert!(http::HeaderValue::from_str(r.www_authenticate.as_deref().unwrap()).is_ok());
    }

    #[test]
    fn exp_and_nbf_with_leeway() {
        let r = rules();
        let rt = Some(route(&r, "any-token"));
        let five = Duration::from_secs(5);
        let at = |c: &Claims, leeway| decide_at(rt, &checked(c), NOW, leeway);
        let with = |exp: Option<i64>, nbf: Option<i64>| Claims {
            exp,
            nbf,
            ..active("read")
        };
        // exp: refused from exp + leeway on.
        assert_eq!(
            at(&with(Some(NOW), None), Duration::ZERO),
            Decision::InvalidToken(EXPIRED_TOKEN)
        );
        assert!(at(&with(Some(NOW + 1), None), Duration::ZERO).is_allow());
        assert!(at(&with(Some(NOW - 4), None), five).is_allow());
        assert_eq!(
            at(&with(Some(NOW - 5), None), five),
            Decision::InvalidToken(EXPIRED_TOKEN)
        );
        // nbf: refused while nbf - leeway is after now.
        assert_eq!(
            at(&with(None, Some(NOW + 1)), Duration::ZERO),
            Decision::InvalidToken(NOT_YET_VALID_TOKEN)
        );
        assert!(at(&with(None, Some(NOW)), Duration::ZERO).is_allow());
        assert!(at(&with(None, Some(NOW + 5)), five).is_allow());
        assert_eq!(
            at(&with(None, Some(NOW + 6)), five),
            Decision::InvalidToken(NOT_YET_VALID_TOKEN)
        );
        assert_eq!(
            at(&with(Some(NOW + 60), Some(NOW + 3600)), five),
            Decision::InvalidToken(NOT_YET_VALID_TOKEN)
        );
        // Fractions of a second do not count; huge leeways saturate instead of overflowing.
        assert_eq!(
            at(&with(Some(NOW), None), Duration::from_millis(999)),
            Decision::InvalidToken(EXPIRED_TOKEN)
        );
        assert!(at(&with(Some(0), Some(NOW)), Duration::MAX).is_allow());
        assert!(decide_at(rt, &checked(&with(Some(1), None)), i64::MIN, five).is_allow());
        // Public routes never look at the token's times.
        assert_eq!(
            decide_at(
                Some(route(&r, "public")),
                &checked(&with(Some(0), Some(crate::claims::MAX_TIME))),
                NOW,
                Duration::ZERO
            ),
            Decision::Allow(None)
        );
    }

    #[test]
    fn refusals_map_to_grpc_codes_with_an_encoded_message() {
        let code = |d: Decision| d.refusal().unwrap().grpc();
        assert_eq!(
            code(Decision::Unauthenticated(String::new())),
            (16, "Authentication credentials were not provided.".into())
        );
        assert_eq!(code(Decision::InvalidToken("expired")).0, 16);
        assert_eq!(code(Decision::InsufficientScope("write".into())).0, 7);
        assert_eq!(code(Decision::Unavailable).0, 14);
        assert_eq!(code(Decision::NoRoute).0, 12);
        let refusal = Refusal {
            status: 500,
            www_authenticate: None,
            body: r#"{"detail":"100% caf\u00e9"}"#.into(),
        };
        assert_eq!(refusal.grpc(), (2, "100%25 caf%C3%A9".into()));
    }
}
