"""Drives tokengate's authorization code flow (RFC 6749 §4.1, PKCE RFC 7636, iss RFC 9207) with
Authlib, unmodified, through the front door (the proxy): sign-in and consent over HTTP with a
requests session, the code exchanged by OAuth2Session, the tokens used on the example API.

Usage: authlib_code_flow.py BASE_URL USERNAME PASSWORD \
           CONFIDENTIAL_NAME CONFIDENTIAL_ID CONFIDENTIAL_SECRET CONFIDENTIAL_REDIRECT_URI \
           PUBLIC_NAME PUBLIC_ID PUBLIC_REDIRECT_URI
The user must be an ordinary (non-staff) account that has authorized nothing yet; both
applications are authorization-code applications allowed `read write`, with the redirect URIs
given registered (they are never served: redirects are read, not followed).
Exits non-zero, with an assertion message, at the first deviation from the contract of issue 13.
"""
import json
import sys
from html import unescape
from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlsplit

import requests
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session, OAuthError
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata

(base, username, password, conf_name, conf_id, conf_secret, conf_redirect,
 public_name, public_id, public_redirect) = sys.argv[1:11]
AUTHORIZE = f"{base}/o/authorize/"
TOKEN = f"{base}/o/token/"


class Forms(HTMLParser):
    """Every form of a page: its attributes, inputs (name -> value, type) and submit buttons."""

    def __init__(self):
        super().__init__()
        self.forms = []
        self.button = None

    def handle_starttag(self, tag, attrs):
        attrs = {k: (v or "") for k, v in attrs}
        if tag == "form":
            self.forms.append({"attrs": attrs, "inputs": {}, "types": {}, "buttons": []})
        elif tag == "input" and self.forms and "name" in attrs:
            form = self.forms[-1]
            form["inputs"][attrs["name"]] = attrs.get("value", "")
            form["types"][attrs["name"]] = attrs.get("type", "text").lower()
        elif tag == "button" and self.forms:
            self.button = {"name": attrs.get("name"), "value": attrs.get("value"),
                           "type": attrs.get("type", "submit"), "text": ""}
            self.forms[-1]["buttons"].append(self.button)

    def handle_data(self, data):
        if self.button is not None:
            self.button["text"] += data

    def handle_endtag(self, tag):
        if tag == "button":
            self.button = None


def forms_of(html):
    parser = Forms()
    parser.feed(html)
    return parser.forms


def hidden(form):
    return {k: v for k, v in form["inputs"].items() if form["types"][k] == "hidden"}


def query_of(location):
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query, keep_blank_values=True).items()}


def redirected_to(response, redirect_uri):
    """The Location of a 303 to the client's redirect URI, with its query parsed."""
    assert response.status_code == 303, f"expected 303 to {redirect_uri}, got {response.status_code}: {response.text[:500]}"
    location = response.headers["Location"]
    assert location.split("?")[0] == redirect_uri, f"redirected to {location}, not to the registered {redirect_uri}"
    return location, query_of(location)


# RFC 8414 metadata (contract 5), also as Authlib's own validator reads it.
metadata = requests.get(f"{base}/.well-known/oauth-authorization-server").json()
AuthorizationServerMetadata(metadata).validate()
issuer = metadata["issuer"]
assert metadata.get("authorization_endpoint", "").endswith("/o/authorize/"), metadata
assert "authorization_code" in metadata.get("grant_types_supported", []), metadata
assert "code" in metadata.get("response_types_supported", []), metadata
assert metadata.get("code_challenge_methods_supported") == ["S256"], metadata
assert metadata.get("authorization_response_iss_parameter_supported") is True, metadata

browser = requests.Session()  # the resource owner's user agent: cookies, no redirects followed


def authorize(client, verifier, scope, redirect_uri, expect_login=False):
    """GET /o/authorize/ as authlib builds it; returns (state, response)."""
    url, state = client.create_authorization_url(AUTHORIZE, code_verifier=verifier, scope=scope)
    assert "code_challenge=" in url and "code_challenge_method=S256" in url, url
    response = browser.get(url, allow_redirects=False)
    if expect_login:
        # Not signed in: 303 to the sign-in page with next = the original path and query.
        assert response.status_code == 303, f"anonymous authorize: {response.status_code} {response.text[:300]}"
        login = urljoin(url, response.headers["Location"])
        assert urlsplit(login).path == "/accounts/login/", login
        parts = urlsplit(url)
        want_next = f"{parts.path}?{parts.query}"
        assert query_of(login).get("next") == want_next, f"next={query_of(login).get('next')!r}, want {want_next!r}"
        page = browser.get(login, allow_redirects=False)
        assert page.status_code == 200, f"sign-in page: {page.status_code}"
        [form] = [f for f in forms_of(page.text) if "password" in f["inputs"]]
        fields = hidden(form)
        assert fields.get("next") == want_next, f"the sign-in form's next is {fields.get('next')!r}"
        fields.update(username=username, password=password)
        signed_in = browser.post(urljoin(login, form["attrs"].get("action") or login), data=fields, allow_redirects=False)
        assert signed_in.status_code == 303, (
            f"a non-staff user's sign-in answered {signed_in.status_code}: {signed_in.text[:500]}"
        )
        back = urljoin(login, signed_in.headers["Location"])
        assert back == url, f"sign-in sent the browser to {back}, not back to {url}"
        response = browser.get(back, allow_redirects=False)
    return state, response


def consent_form(response, app_name, scopes, client_id, redirect_uri, state):
    """Checks the consent page of the contract and returns its form."""
    assert response.status_code == 200, f"expected the consent page, got {response.status_code}: {response.headers.get('Location')} {response.text[:500]}"
    page = response.text
    assert app_name in unescape(page), f"the consent page does not name the application {app_name!r}"
    for scope in scopes:
        assert scope.lower() in page.lower(), f"the consent page does not show the scope {scope}"
    forms = [f for f in forms_of(page) if f["attrs"].get("id") == "consent"]
    assert len(forms) == 1, "the consent page has no <form id=\"consent\">"
    form = forms[0]
    assert form["attrs"].get("method", "").lower() == "post", form["attrs"]
    assert form["attrs"].get("action") == "/o/authorize/", form["attrs"]
    fields = hidden(form)
    assert fields.get("csrfmiddlewaretoken"), f"no csrfmiddlewaretoken hidden input: {sorted(fields)}"
    expected = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
                "scope": " ".join(scopes), "state": state, "code_challenge_method": "S256"}
    for name, value in expected.items():
        assert fields.get(name) == value, f"hidden input {name} is {fields.get(name)!r}, want {value!r}"
    assert fields.get("code_challenge"), "hidden input code_challenge missing"
    decisions = {(b["name"], b["value"]) for b in form["buttons"]}
    assert {("decision", "allow"), ("decision", "deny")} <= decisions, f"buttons: {form['buttons']}"
    return form


def decide(form, decision, page_url):
    fields = hidden(form)
    fields["decision"] = decision
    return browser.post(urljoin(page_url, form["attrs"]["action"]), data=fields, allow_redirects=False)


def use_on_api(token, expect_write_refused):
    """The token through the proxy: GET /users/ (read) is 200; POST /users/ (write) 403 if narrow."""
    api = OAuth2Session(token=token)
    users = api.get(f"{base}/users/")
    assert users.status_code == 200, f"GET /users/ with the access token: {users.status_code} {users.text[:300]}"
    assert any(u.get("username") == username for u in users.json()), users.text[:300]
    if expect_write_refused:
        refused = api.post(f"{base}/users/", json={"username": "nobody"})
        assert refused.status_code == 403, f"POST /users/ with a read-only token: {refused.status_code}"
        assert "insufficient_scope" in refused.headers.get("WWW-Authenticate", ""), refused.headers


# 1. The confidential client: anonymous authorize, sign-in (non-staff), consent, allow.
confidential = OAuth2Session(conf_id, conf_secret, scope="read write", redirect_uri=conf_redirect,
                             code_challenge_method="S256", token_endpoint_auth_method="client_secret_basic")
verifier = generate_token(48)
state, page = authorize(confidential, verifier, "read write", conf_redirect, expect_login=True)
form = consent_form(page, conf_name, ["read", "write"], conf_id, conf_redirect, state)

# The decision is CSRF-protected: the form without its token grants nothing.
forged = {k: v for k, v in hidden(form).items() if k != "csrfmiddlewaretoken"}
forged["decision"] = "allow"
refused = browser.post(AUTHORIZE, data=forged, allow_redirects=False)
assert refused.status_code == 403 and "code=" not in refused.headers.get("Location", ""), (
    f"a consent POST without its CSRF token answered {refused.status_code} {refused.headers.get('Location')}"
)

location, answer = redirected_to(decide(form, "allow", page.url), conf_redirect)
assert answer.get("state") == state, f"state {answer.get('state')!r} != {state!r}"
assert answer.get("iss") == issuer, f"iss {answer.get('iss')!r} != the metadata issuer {issuer!r}"
assert answer.get("code") and "error" not in answer, location
token = confidential.fetch_token(TOKEN, authorization_response=location, code_verifier=verifier, state=state)
assert token["token_type"] == "Bearer", token
assert set(token["scope"].split()) == {"read", "write"}, token
assert token.get("refresh_token"), token
use_on_api(token, expect_write_refused=False)

refreshed = confidential.refresh_token(TOKEN, refresh_token=token["refresh_token"])
assert refreshed["access_token"] != token["access_token"], refreshed
assert set(refreshed["scope"].split()) == {"read", "write"}, refreshed
use_on_api(refreshed, expect_write_refused=False)

# The operator views stay staff-only for this signed-in ordinary user.
operator_view = browser.get(f"{base}/o/applications/", allow_redirects=False)
assert operator_view.status_code == 403, f"/o/applications/ for a non-staff user: {operator_view.status_code}"

# An unregistered redirect URI (a prefix match would accept it) is an error page, never a redirect.
bad = confidential.create_authorization_url(AUTHORIZE, code_verifier=generate_token(48),
                                            redirect_uri=conf_redirect + "x")[0]
shown = browser.get(bad, allow_redirects=False)
assert shown.status_code == 400 and "Location" not in shown.headers, (
    f"unregistered redirect_uri: {shown.status_code} Location={shown.headers.get('Location')}"
)

# 2. A narrower scope: consent given for read+write covers it, so no page; the token reads
# the API and is refused where write is needed. This client authenticates with client_secret_post.
narrow_client = OAuth2Session(conf_id, conf_secret, scope="read", redirect_uri=conf_redirect,
                              code_challenge_method="S256", token_endpoint_auth_method="client_secret_post")
narrow_verifier = generate_token(48)
narrow_state, again = authorize(narrow_client, narrow_verifier, "read", conf_redirect)
narrow_location, narrow_answer = redirected_to(again, conf_redirect)
assert narrow_answer.get("state") == narrow_state and narrow_answer.get("iss") == issuer, narrow_location
narrow = narrow_client.fetch_token(TOKEN, authorization_response=narrow_location, code_verifier=narrow_verifier,
                                   state=narrow_state)
assert narrow["scope"] == "read", narrow
use_on_api(narrow, expect_write_refused=True)

# A code is single-use: the second exchange is invalid_grant and revokes what the first issued.
try:
    narrow_client.fetch_token(TOKEN, authorization_response=narrow_location, code_verifier=narrow_verifier,
                              state=narrow_state)
    raise AssertionError("a second use of the code was accepted")
except OAuthError as error:
    assert error.error == "invalid_grant", f"code reuse answered {error.error}"
try:
    narrow_client.refresh_token(TOKEN, refresh_token=narrow["refresh_token"])
    raise AssertionError("the refresh token of a reused code still works")
except OAuthError as error:
    assert error.error == "invalid_grant", f"refresh after code reuse answered {error.error}"

# 3. A public client (no secret, client_id in the body): deny first, then allow.
public = OAuth2Session(public_id, scope="read", redirect_uri=public_redirect,
                       code_challenge_method="S256", token_endpoint_auth_method="none")
denied_state, page = authorize(public, generate_token(48), "read", public_redirect)
form = consent_form(page, public_name, ["read"], public_id, public_redirect, denied_state)
denied_location, denied = redirected_to(decide(form, "deny", page.url), public_redirect)
assert denied.get("error") == "access_denied", denied_location
assert denied.get("state") == denied_state, f"denial state {denied.get('state')!r} != {denied_state!r}"
assert denied.get("iss") == issuer, denied_location
assert "code" not in denied, denied_location

public_verifier = generate_token(48)
public_state, page = authorize(public, public_verifier, "read", public_redirect)
form = consent_form(page, public_name, ["read"], public_id, public_redirect, public_state)
public_location, public_answer = redirected_to(decide(form, "allow", page.url), public_redirect)
assert public_answer.get("state") == public_state and public_answer.get("iss") == issuer, public_location
public_token = public.fetch_token(TOKEN, authorization_response=public_location, code_verifier=public_verifier,
                                  state=public_state)
assert public_token["scope"] == "read" and public_token.get("refresh_token"), public_token
use_on_api(public_token, expect_write_refused=True)
public_refreshed = public.refresh_token(TOKEN, refresh_token=public_token["refresh_token"])
assert public_refreshed["access_token"] != public_token["access_token"], public_refreshed
use_on_api(public_refreshed, expect_write_refused=True)

# A JSON line: the tokens the Rust test looks up in the store.
print(json.dumps({"access_token": refreshed["access_token"], "reused_code_access_token": narrow["access_token"],
                  "public_access_token": public_refreshed["access_token"]}))
print("authlib: authorization code + PKCE (confidential and public), consent, denial, refresh, "
      "code reuse and the API through the proxy all behaved")
