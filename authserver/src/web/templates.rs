//! The askama templates of the views (files under `authserver/templates/`) and the values they show.

use super::flash::Flash;
use super::session::Operator;
use crate::store::{Application, Group, User};
use crate::validation::Refusals;
use askama::Template;

/// The header every page has: who is signed in, and the token for the sign-out button.
pub(crate) struct Nav {
    pub user: Option<User>,
    pub csrf_token: String,
    /// A one-time message from the POST that led here ("Saved."): set by [`Nav::show`] only.
    notice: Option<String>,
}

/// The CSRF token never reaches a log line through `{:?}`.
impl std::fmt::Debug for Nav {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nav")
            .field("user", &self.user.as_ref().map(|u| u.id))
            .field("csrf_token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl Nav {
    pub fn anonymous() -> Nav {
        Nav {
            user: None,
            csrf_token: String::new(),
            notice: None,
        }
    }

    pub fn of(operator: &Operator) -> Nav {
        Nav::signed_in(&operator.user, &operator.form_token)
    }

    /// The header of a page for any signed-in user.
    pub fn signed_in(user: &User, csrf_token: &str) -> Nav {
        Nav {
            user: Some(user.clone()),
            csrf_token: csrf_token.to_owned(),
            notice: None,
        }
    }

    /// Shows the notice of the flash this page took (see [`super::flash::take`]), if any: the
    /// one way a notice reaches a page.
    pub fn show(&mut self, flash: Option<&Flash>) {
        self.notice = flash.map(|flash| flash.notice.clone());
    }
}

/// One option of a select or one checkbox of a group.
pub(crate) struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

/// `2025-01-31 14:05 UTC` from seconds since the epoch.
pub(crate) fn utc(timestamp: i64) -> String {
    let days = timestamp.div_euclid(86_400);
    let seconds = timestamp.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        seconds / 3600,
        seconds % 3600 / 60
    )
}

#[derive(Template)]
#[template(path = "error.html")]
pub(crate) struct ErrorPage {
    pub nav: Nav,
    pub title: &'static str,
    pub message: &'static str,
}

impl ErrorPage {
    /// Where the page leads on: an operator to the applications, anyone else signed in to the
    /// applications they authorized (the only page that is theirs), a visitor to sign in.
    pub fn link(&self) -> (&'static str, &'static str) {
        match &self.nav.user {
            Some(u) if u.is_staff || u.is_superuser => {
                ("/o/applications/", "Back to the applications")
            }
            Some(_) => (
                "/o/authorized-tokens/",
                "Go to your authorized applications",
            ),
            None => ("/accounts/login/", "Sign in"),
        }
    }
}

#[derive(Template)]
#[template(path = "login.html")]
pub(crate) struct LoginPage {
    pub nav: Nav,
    pub csrf_token: String,
    pub username: String,
    pub next: String,
    pub error: Option<String>,
    /// The application an authorization in progress is for, named on the page.
    pub application: Option<String>,
}

#[derive(Template)]
#[template(path = "login_code.html")]
pub(crate) struct LoginCodePage {
    pub nav: Nav,
    pub csrf_token: String,
    pub next: String,
    pub error: Option<String>,
    /// The application an authorization in progress is for, named on the page.
    pub application: Option<String>,
    /// The user has a TOTP factor: the code form asks for its code.
    pub totp: bool,
    /// The user has a TOTP factor or recovery codes: the code form is shown.
    pub codes: bool,
    /// The user has a passkey: the page offers it.
    pub passkey: bool,
}

/// One of a user's passkeys on their two-factor page.
pub(crate) struct PasskeyRow {
    /// base64url.
    pub credential_id: String,
    pub name: String,
    pub created: String,
    pub last_used: String,
}

/// `/accounts/two-factor/`: enrolment (`setup`), the codes shown once (`recovery`), or the
/// factor in use (`enabled`).
#[derive(Template)]
#[template(path = "two_factor.html")]
pub(crate) struct TwoFactorPage {
    pub nav: Nav,
    pub stage: &'static str,
    pub otpauth_uri: String,
    /// The QR code of the URI as a `data:image/svg+xml` URI.
    pub qr_data_uri: String,
    /// The secret in base32, for typing into an app.
    pub secret: String,
    pub recovery_codes: Vec<String>,
    pub recovery_left: i64,
    pub error: Option<String>,
    pub passkeys: Vec<PasskeyRow>,
    /// The user has a second factor (TOTP or a passkey): recovery codes can be made anew.
    pub has_factor: bool,
}

/// One line of the applications list.
pub(crate) struct ApplicationRow {
    pub id: i64,
    pub name: String,
    pub client_id: String,
    pub client_type: &'static str,
    pub grant_label: &'static str,
    pub owner: String,
    /// Registered by the client itself (RFC 7591), not by an operator.
    pub dynamic: bool,
}

#[derive(Template)]
#[template(path = "applications/list.html")]
pub(crate) struct ApplicationList {
    pub nav: Nav,
    pub applications: Vec<ApplicationRow>,
    pub show_owner: bool,
}

/// What the application form shows: the values entered (or stored) as text, the same draft the
/// shared validation reads.
pub(crate) type ApplicationValues = crate::validation::ApplicationDraft;

#[derive(Template)]
#[template(path = "applications/form.html")]
pub(crate) struct ApplicationForm {
    pub nav: Nav,
    /// Only superusers see (and may tick) "may introspect".
    pub may_set_introspect: bool,
    pub title: String,
    pub action: String,
    pub cancel: String,
    pub values: ApplicationValues,
    pub errors: Refusals,
    pub client_types: Vec<Choice>,
    pub grant_types: Vec<Choice>,
    pub scopes: Vec<Choice>,
    /// Empty (the server's default), `opaque`, `jwt`.
    pub token_formats: Vec<Choice>,
    /// OpenID Connect: post-logout redirect URIs and the ID-token algorithm, as entered.
    pub oidc: crate::validation::OidcDraft,
    /// `RS256`, `EdDSA`.
    pub id_token_algs: Vec<Choice>,
    /// The grant chosen is the authorization code grant: its section (redirect URIs, PKCE,
    /// OpenID Connect) is shown; otherwise it is rendered hidden and disabled, and
    /// `static/app.js` shows it when that grant is chosen.
    pub code_grant: bool,
}

#[derive(Template)]
#[template(path = "applications/detail.html")]
pub(crate) struct ApplicationDetail {
    pub nav: Nav,
    pub app: Application,
    /// An authorization code application: redirect URIs, PKCE and OpenID Connect are shown.
    pub code_grant: bool,
    /// OpenID Connect: `id_token_signed_response_alg`.
    pub id_token_alg: String,
    /// Its users must sign in with a second factor.
    pub require_mfa: bool,
    pub post_logout_redirect_uris: Vec<String>,
    /// The secret in full: only right after registration or regeneration.
    pub secret: Option<String>,
    pub fingerprint: Option<String>,
    pub redirect_uris: Vec<String>,
    pub scopes: String,
    pub owner: String,
    pub created: String,
    /// Whether it must send PKCE, in words.
    pub pkce: &'static str,
    /// Its access-token format, in words (saying when it is the server's default).
    pub token_format: String,
    /// How it authenticates at the token endpoint, in words (RFC 8705 method and registration).
    pub client_auth: String,
    /// Registered by the client itself (RFC 7591): when, in words.
    pub dynamic: Option<String>,
}

#[derive(Template)]
#[template(path = "applications/regenerate.html")]
pub(crate) struct ApplicationRegenerate {
    pub nav: Nav,
    pub app: Application,
}

#[derive(Template)]
#[template(path = "applications/delete.html")]
pub(crate) struct ApplicationDelete {
    pub nav: Nav,
    pub app: Application,
}

/// One requested scope on the consent page.
pub(crate) struct ConsentScope {
    pub name: String,
    pub description: String,
    /// The OpenID Connect claims the scope releases, comma-separated (empty for others).
    pub claims: String,
}

#[derive(Template)]
#[template(path = "oauth/consent.html")]
pub(crate) struct ConsentPage {
    pub nav: Nav,
    pub application: String,
    pub scopes: Vec<ConsentScope>,
    /// The authorization request, as hidden fields.
    pub fields: Vec<(String, String)>,
    pub csrf_token: String,
}

#[derive(Template)]
#[template(path = "oauth/error.html")]
pub(crate) struct AuthorizeErrorPage {
    pub nav: Nav,
    pub message: &'static str,
}

#[derive(Template)]
#[template(path = "oauth/logout.html")]
pub(crate) struct LogoutPage {
    pub nav: Nav,
    /// `confirm`, `done` or `refused`.
    pub stage: &'static str,
    pub message: &'static str,
    /// The request, as the confirmation form's hidden fields.
    pub fields: Vec<(String, String)>,
    pub csrf_token: String,
    /// The relying party's name, when it said who it is.
    pub application: String,
}

/// One line of the authorized applications.
pub(crate) struct AuthorizedRow {
    pub id: i64,
    pub name: String,
    pub client_id: String,
    pub scopes: Vec<String>,
    pub granted: String,
}

#[derive(Template)]
#[template(path = "oauth/authorized.html")]
pub(crate) struct AuthorizedList {
    pub nav: Nav,
    pub applications: Vec<AuthorizedRow>,
}

#[derive(Template)]
#[template(path = "admin/index.html")]
pub(crate) struct AdminIndex {
    pub nav: Nav,
    pub user_count: usize,
    pub group_count: usize,
}

#[derive(Template)]
#[template(path = "admin/users.html")]
pub(crate) struct UserList {
    pub nav: Nav,
    pub users: Vec<User>,
    pub q: String,
}

/// The user form's values as text and ticks.
#[derive(Debug, Clone, Default)]
pub(crate) struct UserValues {
    pub username: String,
    pub email: String,
    /// OpenID Connect's `email_verified`: the operator vouches for the address.
    pub email_verified: bool,
    pub first_name: String,
    pub last_name: String,
    pub is_active: bool,
    pub is_staff: bool,
    pub is_superuser: bool,
}

#[derive(Template)]
#[template(path = "admin/user_form.html")]
pub(crate) struct UserForm {
    pub nav: Nav,
    pub title: String,
    pub action: String,
    /// Creation asks for the password too; editing links to the reset page instead.
    pub creating: bool,
    pub user_id: i64,
    pub values: UserValues,
    pub errors: Refusals,
    pub groups: Vec<Group>,
    /// When the profile last changed (OpenID Connect's `updated_at`), for an existing user.
    pub updated_at: Option<String>,
    /// Whether the user signs in with a second factor.
    pub two_factor: bool,
}

#[derive(Template)]
#[template(path = "admin/password.html")]
pub(crate) struct PasswordForm {
    pub nav: Nav,
    pub user: User,
    pub errors: Refusals,
}

#[derive(Template)]
#[template(path = "admin/user_delete.html")]
pub(crate) struct UserDelete {
    pub nav: Nav,
    pub user: User,
    pub errors: Refusals,
}

#[derive(Template)]
#[template(path = "admin/resources.html")]
pub(crate) struct ResourceList {
    pub nav: Nav,
    pub resources: Vec<crate::domain::Resource>,
    pub draft: crate::validation::ResourceDraft,
    pub errors: Refusals,
}

/// One line of the groups list.
pub(crate) struct GroupRow {
    pub id: i64,
    pub name: String,
    pub members: usize,
}

#[derive(Template)]
#[template(path = "admin/groups.html")]
pub(crate) struct GroupList {
    pub nav: Nav,
    pub groups: Vec<GroupRow>,
    pub name: String,
    pub errors: Refusals,
}

#[derive(Template)]
#[template(path = "admin/group.html")]
pub(crate) struct GroupDetail {
    pub nav: Nav,
    pub group: Group,
    pub name: String,
    pub members: Vec<User>,
    pub member_username: String,
    pub errors: Refusals,
}

#[derive(Template)]
#[template(path = "admin/group_delete.html")]
pub(crate) struct GroupDelete {
    pub nav: Nav,
    pub group: Group,
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn timestamps_read_as_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc(1_735_689_599), "2024-12-31 23:59 UTC");
    }
}
