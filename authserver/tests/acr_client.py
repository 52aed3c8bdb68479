"""A relying party and a person with an authenticator app (pyotp), for acr/amr/auth_time and
step-up at the authorization endpoint: the person signs in with a password, then enrols TOTP in
that session; an authorization without acr_values gives tokens of a password sign-in; one with
acr_values=urn:tokengate:acr:mfa sends them to sign in again, with a code, and gives tokens of
a two-factor sign-in; asked again, the two-factor session is enough; prompt=login and max_age=0
force a sign-in. Each token's ID token, JWT access token and introspection answer are read.

Usage: acr_client.py BASE CLIENT_ID CLIENT_SECRET REDIRECT_URI USERNAME PASSWORD
                     INTROSPECTOR_ID INTROSPECTOR_SECRET

Prints a JSON summary on its last line; exits non-zero at the first deviation.
"""

import base64
import hashlib
import html
import json
import re
import secrets
import sys
import time
import urllib.parse

import pyotp
import requests

(base, client_id, client_secret, redirect_uri, username, password, introspector,
 introspector_secret) = sys.argv[1:9]
MFA = "urn:tokengate:acr:mfa"


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def hidden(page, name):
    found = re.search(r'name="%s" value="([^"]*)"' % re.escape(name), page)
    if not found:
        fail(f"no hidden {name} in {page[:2000]}")
    return html.unescape(found.group(1))


def claims_of(jwt):
    payload = jwt.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def local(location):
    return location if location.startswith("/") else urllib.parse.urlsplit(location)._replace(
        scheme="", netloc="").geturl()


browser = requests.Session()
totp = None


def password_step(path):
    """The sign-in form at `path` (its next, prompt and login_hint kept), filled in."""
    page = browser.get(f"{base}{path}", timeout=10).text
    return browser.post(
        f"{base}/accounts/login/",
        data={"csrf_token": hidden(page, "csrf_token"), "next": hidden(page, "next"),
              "username": username, "password": password},
        allow_redirects=False, timeout=10)


def code_step(location, code):
    page = browser.get(f"{base}{location}", timeout=10).text
    return browser.post(
        f"{base}/accounts/login/code/",
        data={"csrf_token": hidden(page, "csrf_token"), "next": hidden(page, "next"),
              "code": code},
        allow_redirects=False, timeout=10)


def authorize(extra):
    """An authorization request; signs in (password, and a code when asked) and consents as
    needed. (tokens, whether a sign-in was asked, whether a code was asked)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
             "scope": "openid read", "state": "st", "nonce": "n",
             "code_challenge": challenge.decode(), "code_challenge_method": "S256", **extra}
    answer = browser.get(f"{base}/o/authorize/", params=query, allow_redirects=False,
                         timeout=10)
    signed_in = asked_code = False
    for _ in range(8):
        location = answer.headers.get("location", "")
        if answer.status_code == 303 or answer.status_code == 302:
            if location.startswith(redirect_uri):
                break
            path = local(location)
            if path.startswith("/accounts/login/code/"):
                asked_code = True
                answer = code_step(path, totp.now())
                continue
            if path.startswith("/accounts/login/"):
                signed_in = True
                answer = password_step(path)
                continue
            answer = browser.get(f"{base}{path}", allow_redirects=False, timeout=10)
            continue
        if answer.status_code == 200 and 'name="decision"' in answer.text:
            fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"',
                                     answer.text))
            fields = {k: html.unescape(v) for k, v in fields.items()}
            fields["decision"] = "allow"
            answer = browser.post(f"{base}/o/authorize/", data=fields, allow_redirects=False,
                                  timeout=10)
            continue
        fail(f"authorize: {answer.status_code} {location} {answer.text[:1500]}")
    back = urllib.parse.parse_qs(urllib.parse.urlsplit(answer.headers["location"]).query)
    if "code" not in back:
        fail(f"no code: {back}")
    tokens = requests.post(
        f"{base}/o/token/",
        data={"grant_type": "authorization_code", "code": back["code"][0],
              "redirect_uri": redirect_uri, "code_verifier": verifier},
        auth=(client_id, client_secret), timeout=10).json()
    if "access_token" not in tokens:
        fail(f"token: {tokens}")
    introspected = requests.post(
        f"{base}/o/introspect/", data={"token": tokens["access_token"]},
        auth=(introspector, introspector_secret), timeout=10).json()
    picked = {}
    for name, claims in [("id_token", claims_of(tokens["id_token"])),
                         ("access_token", claims_of(tokens["access_token"])),
                         ("introspection", introspected)]:
        picked[name] = {k: claims.get(k) for k in ("acr", "amr", "auth_time")}
    return {"tokens": picked, "signed_in": signed_in, "asked_code": asked_code,
            "access_token": tokens["access_token"]}


summary = {}
started = int(time.time())
# A password sign-in, then TOTP enrolled in that session.
first = password_step("/accounts/login/?next=/o/authorized-tokens/")
if first.status_code != 303:
    fail(f"password sign-in: {first.status_code}")
setup = browser.get(f"{base}/accounts/two-factor/", timeout=10).text
uri = html.unescape(re.search(r'id="otpauth-uri" href="([^"]+)"', setup).group(1))
totp = pyotp.parse_uri(uri)
confirmed = browser.post(
    f"{base}/accounts/two-factor/",
    data={"csrf_token": hidden(setup, "csrf_token"), "action": "confirm",
          "code": totp.at(time.time() - 30)},
    timeout=10)
if confirmed.status_code != 200:
    fail(f"confirm: {confirmed.status_code}")
recovery = re.findall(r"<li><code>([a-z0-9-]+)</code></li>", confirmed.text)

summary["password_session"] = authorize({})
summary["step_up"] = authorize({"acr_values": MFA})
summary["mfa_session"] = authorize({"acr_values": f"{MFA} urn:tokengate:acr:pwd"})
# A forced sign-in: the password, then a code (of the next step: each code is taken once).
totp.now = lambda: totp.at(time.time() + 30)
summary["prompt_login"] = authorize({"prompt": "login"})
# max_age=0: signed in again, this time with a recovery code.
totp.now = lambda: recovery[0]
summary["max_age_0"] = authorize({"max_age": "0"})
summary["no_max_age"] = authorize({})
summary["started"] = started
print(json.dumps(summary))
