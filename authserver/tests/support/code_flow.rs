//! The authorization code flow over real HTTP, shared by the code-flow test binaries: a server
//! with an ordinary user, `alice`, registered clients, sign-in, authorization, consent and the
//! token endpoint.

use authserver::config::{AccessTokenFormat, Settings};
use authserver::protocol::pkce;
use authserver::store::{ApplicationInput, ClientType, GrantType, NewUser, Store};
use authserver::testing::{self, RunningServer};
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use serde_json::Value;
use std::collections::HashMap;

pub const REDIRECT: &str = "https://client.example/callback";
pub const OTHER_REDIRECT: &str = "http://127.0.0.1:9876/cb?x=1";
pub const PASSWORD: &str = "wonderland-pass";

/// A server on a fresh store with an ordinary user, `alice`.
pub struct Fixture {
    pub server: RunningServer,
    pub store: Store,
    pub http: reqwest::Client,
    pub issuer: String,
}

/// A registered client.
pub struct Client {
    pub id: String,
    pub secret: Option<String>,
    pub app_id: i64,
}

/// One HTTP answer, read whole.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The query of the redirect, which must go to `redirect_uri`.
    pub fn redirected_to(&self, redirect_uri: &str) -> HashMap<String, String> {
        assert_eq!(self.status, StatusCode::SEE_OTHER, "{}", self.body);
        let location = self.location();
        let separator = if redirect_uri.contains('?') { '&' } else { '?' };
        let query = location
            .strip_prefix(&format!("{redirect_uri}{separator}"))
            .unwrap_or_else(|| panic!("{location} is not a redirect to {redirect_uri}"));
        form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect()
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// A verifier and its S256 challenge.
pub fn pkce_pair() -> (String, String) {
    let verifier = authserver::secrets::random_token();
    let challenge = pkce::s256(&verifier);
    (verifier, challenge)
}

fn unescape(html: &str) -> String {
    html.replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&lt;", "<")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#38;", "&")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The text between `marker` and the next `"` in `text` (an attribute value).
fn quoted_after<'a>(text: &'a str, marker: &str) -> &'a str {
    text.split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("no {marker} in {text}"))
        .split('"')
        .next()
        .unwrap()
}

/// The hidden inputs of the form with `id`, in order.
pub fn hidden_fields(body: &str, form_id: &str) -> Vec<(String, String)> {
    let start = body
        .find(&format!("id=\"{form_id}\""))
        .unwrap_or_else(|| panic!("no form {form_id} in {body}"));
    let form = &body[start..start + body[start..].find("</form>").unwrap()];
    form.split("<input type=\"hidden\" ")
        .skip(1)
        .map(|input| {
            (
                unescape(quoted_after(input, "name=\"")),
                unescape(quoted_after(input, "value=\"")),
            )
        })
        .collect()
}

/// The value of the first input `name` of a page.
pub fn input_value(body: &str, name: &str) -> String {
    quoted_after(body, &format!("name=\"{name}\" value=\"")).to_owned()
}

/// The CSRF token of the first form of a page.
pub fn csrf_token(body: &str) -> String {
    input_value(body, "csrf_token")
}

/// The `Content-Security-Policy` of `reply`, which lets its forms lead to the client's origin.
pub fn assert_form_action_allows_the_client(reply: &Reply) -> &str {
    let csp = reply.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(
        csp.contains("form-action 'self' https://client.example;"),
        "{csp}"
    );
    csp
}

/// The first `Set-Cookie` value (`name=value`) for `name`.
pub fn set_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap().to_owned())
}

impl Fixture {
    pub async fn start(store: Store, tweak: impl FnOnce(&mut Settings)) -> Fixture {
        let user = NewUser {
            username: "alice".into(),
            password: Some(PASSWORD.into()),
            is_active: true,
            ..Default::default()
        };
        store.create_user(&user).await.unwrap();
        Fixture::start_again(store, tweak).await
    }

    /// A server on a store that has its user already.
    pub async fn start_again(store: Store, tweak: impl FnOnce(&mut Settings)) -> Fixture {
        let mut settings = Settings::for_tests("unused");
        tweak(&mut settings);
        let issuer = settings.issuer.clone();
        let server =
            testing::spawn_server(store.clone(), settings, "127.0.0.1:0".parse().unwrap()).await;
        Fixture {
            server,
            store,
            http: super::browser_client(),
            issuer,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base_url)
    }

    /// Registers the application `input` in the store.
    pub async fn register(&self, input: &ApplicationInput) -> Client {
        let (app, secret) = self
            .store
            .create_application(input, None, None, None)
            .await
            .unwrap();
        Client {
            id: app.client_id,
            secret,
            app_id: app.id,
        }
    }

    pub async fn client(
        &self,
        client_type: ClientType,
        pkce_required: bool,
        allowed_scopes: &[&str],
    ) -> Client {
        self.client_with(client_type, pkce_required, allowed_scopes, None)
            .await
    }

    /// A "Photo <Printer>" application redirecting to `REDIRECT` and `OTHER_REDIRECT`.
    pub async fn client_with(
        &self,
        client_type: ClientType,
        pkce_required: bool,
        allowed_scopes: &[&str],
        token_format: Option<AccessTokenFormat>,
    ) -> Client {
        self.register(&ApplicationInput {
            name: format!("Photo <Printer> {}", client_type.as_str()),
            client_type,
            grant_type: GrantType::AuthorizationCode,
            redirect_uris: format!("{REDIRECT} {OTHER_REDIRECT}"),
            allowed_scopes: allowed_scopes.iter().map(|s| s.to_string()).collect(),
            may_introspect: false,
            may_use_ssf: false,
            pkce_required,
            token_format,
        })
        .await
    }

    pub async fn send(&self, request: reqwest::RequestBuilder, cookie: Option<&str>) -> Reply {
        let request = match cookie {
            Some(cookie) => request.header(header::COOKIE, cookie),
            None => request,
        };
        let response = request.send().await.unwrap();
        Reply {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    pub async fn get(&self, path_and_query: &str, cookie: Option<&str>) -> Reply {
        self.send(self.http.get(self.url(path_and_query)), cookie)
            .await
    }

    pub async fn post(&self, path: &str, cookie: Option<&str>, form: &[(String, String)]) -> Reply {
        self.send(self.http.post(self.url(path)).form(form), cookie)
            .await
    }

    /// Posts the sign-in form (with the extra `cookie`, if any, sent along); the reply.
    pub async fn sign_in_reply(
        &self,
        username: &str,
        password: &str,
        next: &str,
        cookie: Option<&str>,
    ) -> Reply {
        let page = self.get("/accounts/login/", None).await;
        let csrf_cookie = set_cookie(&page.headers, "tokengate_csrf").unwrap();
        let token = csrf_token(&page.body);
        let cookies = match cookie {
            Some(extra) => format!("{csrf_cookie}; {extra}"),
            None => csrf_cookie,
        };
        let form = [
            ("csrf_token", token.as_str()),
            ("username", username),
            ("password", password),
            ("next", next),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        self.post("/accounts/login/", Some(&cookies), &form).await
    }

    /// Signs `username` in through the sign-in form; the session cookie.
    pub async fn sign_in(&self, username: &str, password: &str, next: &str) -> (String, Reply) {
        let reply = self.sign_in_reply(username, password, next, None).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        let session = set_cookie(&reply.headers, "tokengate_session").unwrap();
        (session, reply)
    }

    pub async fn alice(&self) -> String {
        self.sign_in("alice", PASSWORD, "").await.0
    }

    /// `/o/authorize/?…` with these parameters (None values left out).
    pub fn authorize_path(pairs: &[(&str, Option<&str>)]) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in pairs {
            if let Some(value) = value {
                query.append_pair(name, value);
            }
        }
        format!("/o/authorize/?{}", query.finish())
    }

    /// A well-formed authorization request of `client_id` to `redirect_uri` for `scope`.
    pub fn request_to(
        client_id: &str,
        redirect_uri: &str,
        scope: &str,
        state: &str,
        challenge: Option<&str>,
    ) -> String {
        Fixture::authorize_path(&[
            ("response_type", Some("code")),
            ("client_id", Some(client_id)),
            ("redirect_uri", Some(redirect_uri)),
            ("scope", Some(scope)),
            ("state", Some(state)),
            ("code_challenge", challenge),
            ("code_challenge_method", challenge.map(|_| "S256")),
        ])
    }

    /// A well-formed authorization request of `client` for `scope`.
    pub fn request(client: &Client, scope: &str, state: &str, challenge: Option<&str>) -> String {
        Fixture::request_to(&client.id, REDIRECT, scope, state, challenge)
    }

    /// `GET` of [`Fixture::request`], as the session `cookie` if any.
    pub async fn ask(
        &self,
        client: &Client,
        scope: &str,
        state: &str,
        challenge: Option<&str>,
        cookie: Option<&str>,
    ) -> Reply {
        self.get(&Fixture::request(client, scope, state, challenge), cookie)
            .await
    }

    /// Authorizes as the session `cookie` (state `st`): through the consent page (allowing)
    /// when shown. The query of the redirect to `REDIRECT`.
    pub async fn authorize(
        &self,
        cookie: &str,
        client: &Client,
        scope: &str,
        challenge: Option<&str>,
    ) -> HashMap<String, String> {
        let page = self.ask(client, scope, "st", challenge, Some(cookie)).await;
        let reply = if page.status == StatusCode::OK {
            self.decide(cookie, &page, "allow").await
        } else {
            page
        };
        reply.redirected_to(REDIRECT)
    }

    /// [`Fixture::authorize`], checking that the redirect carries the state and the issuer.
    /// The code.
    pub async fn code(
        &self,
        cookie: &str,
        client: &Client,
        scope: &str,
        challenge: Option<&str>,
    ) -> String {
        let answer = self.authorize(cookie, client, scope, challenge).await;
        assert_eq!(answer.get("state").map(String::as_str), Some("st"));
        assert_eq!(answer.get("iss"), Some(&self.issuer));
        code_of(&answer)
    }

    /// Posts the consent form of `page` with `decision`.
    pub async fn decide(&self, cookie: &str, page: &Reply, decision: &str) -> Reply {
        let mut fields = hidden_fields(&page.body, "consent");
        fields.push(("decision".into(), decision.into()));
        self.post("/o/authorize/", Some(cookie), &fields).await
    }

    /// `POST /o/token/` for `client` (Basic for a confidential client, `client_id` for a
    /// public one) with `form`, not sent yet.
    pub fn token_request(&self, client: &Client, form: &[(&str, &str)]) -> reqwest::RequestBuilder {
        let mut pairs: Vec<(String, String)> = form
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let request = self.http.post(self.url("/o/token/"));
        let request = match &client.secret {
            Some(secret) => request.basic_auth(&client.id, Some(secret)),
            None => {
                pairs.push(("client_id".into(), client.id.clone()));
                request
            }
        };
        request.form(&pairs)
    }

    /// [`Fixture::token_request`], sent.
    pub async fn token(&self, client: &Client, form: &[(&str, &str)]) -> Reply {
        self.send(self.token_request(client, form), None).await
    }

    /// Exchanges `code` with `redirect_uri` `REDIRECT`.
    pub async fn exchange(&self, client: &Client, code: &str, verifier: Option<&str>) -> Reply {
        self.exchange_to(client, code, Some(REDIRECT), verifier)
            .await
    }

    /// Exchanges `code` with this `redirect_uri` and `code_verifier` (None: left out).
    pub async fn exchange_to(
        &self,
        client: &Client,
        code: &str,
        redirect_uri: Option<&str>,
        verifier: Option<&str>,
    ) -> Reply {
        let request = self.exchange_request(client, code, redirect_uri, verifier);
        self.send(request, None).await
    }

    /// The request of [`Fixture::exchange_to`], not sent yet.
    pub fn exchange_request(
        &self,
        client: &Client,
        code: &str,
        redirect_uri: Option<&str>,
        verifier: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut form = vec![("grant_type", "authorization_code"), ("code", code)];
        form.extend(redirect_uri.map(|uri| ("redirect_uri", uri)));
        form.extend(verifier.map(|verifier| ("code_verifier", verifier)));
        self.token_request(client, &form)
    }

    /// The id of the user `username`.
    pub async fn user_id(&self, username: &str) -> i64 {
        self.store
            .find_user_by_username(username)
            .await
            .unwrap()
            .unwrap()
            .id
    }

    pub async fn active(&self, token: &str) -> bool {
        self.store
            .find_token(token)
            .await
            .unwrap()
            .is_some_and(|r| r.is_active())
    }
}

/// The code in a redirect's query.
pub fn code_of(answer: &HashMap<String, String>) -> String {
    answer
        .get("code")
        .cloned()
        .unwrap_or_else(|| panic!("{answer:?}"))
}
