"""A relying party nobody here wrote: Authlib's OpenID Connect client pieces, unmodified, against
tokengate's authorization server, and PyJWT verifying the ID tokens against the JWKS.

Usage: oidc_rp.py BASE_URL USERNAME PASSWORD CLIENT_ID CLIENT_SECRET REDIRECT_URI

Discovery (Authlib's OpenIDProviderMetadata validator), the code flow with PKCE and a nonce
(Authlib's OAuth2Session, the user's browser played by a requests session that signs in and
consents), the ID token checked by Authlib's CodeIDToken (signature by kid from the JWKS, iss,
aud, exp, iat, nonce, at_hash, azp, auth_time) and by PyJWT's PyJWKClient, then refused by both
for a wrong nonce, another audience and another access token; UserInfo with the access token
(sub must match the ID token's). Prints a JSON summary; exits non-zero at the first deviation.
"""

import json
import sys
import time
import warnings
from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlsplit

import jwt as pyjwt
import requests
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session
from authlib.oidc.discovery import OpenIDProviderMetadata

warnings.filterwarnings("ignore", message="authlib.jose module is deprecated")
from authlib.jose import JsonWebKey  # noqa: E402
from authlib.jose import jwt as authlib_jwt  # noqa: E402
from authlib.jose.errors import JoseError  # noqa: E402
from authlib.oidc.core import CodeIDToken  # noqa: E402

base, username, password, client_id, client_secret, redirect_uri = sys.argv[1:7]


class Forms(HTMLParser):
    """Every form of a page: its attributes and inputs (name -> value)."""

    def __init__(self):
        super().__init__()
        self.forms = []

    def handle_starttag(self, tag, attrs):
        attrs = {k: (v or "") for k, v in attrs}
        if tag == "form":
            self.forms.append({"attrs": attrs, "inputs": {}})
        elif tag == "input" and self.forms and "name" in attrs:
            self.forms[-1]["inputs"][attrs["name"]] = attrs.get("value", "")


def forms_of(html):
    parser = Forms()
    parser.feed(html)
    return parser.forms


def query_of(location):
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


# Discovery, checked by Authlib's own validator of OpenID Connect Discovery 1.0.
metadata = requests.get(f"{base}/.well-known/openid-configuration").json()
OpenIDProviderMetadata(metadata).validate()
issuer = metadata["issuer"]
# The test server's issuer is a name, not where it listens: its endpoints are reached at BASE_URL.
for name, value in list(metadata.items()):
    if name.endswith(("_endpoint", "_uri")) and isinstance(value, str) and value.startswith(issuer):
        metadata[name] = base + value[len(issuer):]
client = OAuth2Session(
    client_id,
    client_secret,
    scope="openid profile email",
    redirect_uri=redirect_uri,
    code_challenge_method="S256",
)
verifier = generate_token(48)
nonce = generate_token(20)
url, state = client.create_authorization_url(
    metadata["authorization_endpoint"], code_verifier=verifier, nonce=nonce
)
assert f"nonce={nonce}" in url, url

browser = requests.Session()
reply = browser.get(url, allow_redirects=False)
assert reply.status_code == 303, f"anonymous authorize: {reply.status_code} {reply.text[:300]}"
login = urljoin(url, reply.headers["Location"])
page = browser.get(login)
[form] = [f for f in forms_of(page.text) if "password" in f["inputs"]]
fields = dict(form["inputs"], username=username, password=password)
signed_in = browser.post(urljoin(login, form["attrs"].get("action") or login), data=fields, allow_redirects=False)
assert signed_in.status_code == 303, f"sign-in: {signed_in.status_code} {signed_in.text[:300]}"
consent = browser.get(urljoin(login, signed_in.headers["Location"]), allow_redirects=False)
assert consent.status_code == 200, f"consent page: {consent.status_code} {consent.text[:300]}"
for claim in ["preferred_username", "email_verified"]:
    assert claim in consent.text, f"the consent page does not name {claim}"
[form] = [f for f in forms_of(consent.text) if f["attrs"].get("id") == "consent"]
allowed = browser.post(urljoin(url, form["attrs"]["action"]), data=dict(form["inputs"], decision="allow"), allow_redirects=False)
assert allowed.status_code == 303, f"consent: {allowed.status_code} {allowed.text[:300]}"
location = allowed.headers["Location"]
assert location.startswith(redirect_uri + "?"), location
assert query_of(location).get("state") == state, location

token = client.fetch_token(
    metadata["token_endpoint"], authorization_response=location, code_verifier=verifier
)
id_token = token["id_token"]
access_token = token["access_token"]
# Fetched now, as a relying party does for a kid it has not seen (the RS256 key may be younger
# than the discovery fetch).
jwks = requests.get(metadata["jwks_uri"]).json()


def authlib_claims(id_token, nonce, client_id, access_token):
    """Authlib's CodeIDToken: decoded against the JWKS, then validated."""
    claims = authlib_jwt.decode(
        id_token,
        JsonWebKey.import_key_set(jwks),
        claims_cls=CodeIDToken,
        claims_options={"iss": {"values": [issuer]}},
        claims_params={"nonce": nonce, "client_id": client_id, "access_token": access_token},
    )
    claims.validate(now=int(time.time()), leeway=5)
    return claims


claims = authlib_claims(id_token, nonce, client_id, access_token)
assert claims["nonce"] == nonce and claims["aud"] == client_id, claims
assert claims["at_hash"], claims
assert claims["auth_time"] <= claims["iat"], claims

refusals = {}
for name, args in {
    "wrong_nonce": (id_token, "another-nonce", client_id, access_token),
    "other_audience": (id_token, nonce, "another-client", access_token),
    "other_access_token": (id_token, nonce, client_id, access_token + "x"),
}.items():
    try:
        authlib_claims(*args)
    except Exception as error:  # authlib.jose's or (newer Authlib) joserfc's claim errors
        assert "Claim" in type(error).__name__ or isinstance(error, JoseError), repr(error)
        refusals[name] = type(error).__name__
    else:
        raise AssertionError(f"authlib accepted the ID token with {name}")

# PyJWT, with its own JWKS client (kid lookup) and RS256 only.
signing_key = pyjwt.PyJWKClient(metadata["jwks_uri"]).get_signing_key_from_jwt(id_token)
pyjwt_claims = pyjwt.decode(
    id_token,
    signing_key.key,
    algorithms=["RS256"],
    audience=client_id,
    issuer=issuer,
    options={"require": ["iss", "sub", "aud", "exp", "iat"]},
)
assert pyjwt_claims == dict(claims), (pyjwt_claims, dict(claims))
try:
    pyjwt.decode(id_token, signing_key.key, algorithms=["RS256"], audience="another-client", issuer=issuer)
    raise AssertionError("PyJWT accepted another audience")
except pyjwt.InvalidAudienceError:
    refusals["pyjwt_other_audience"] = "InvalidAudienceError"

summary = {
    "alg": pyjwt.get_unverified_header(id_token)["alg"],
    "sub": claims["sub"],
    "claims": sorted(claims.keys()),
    "refusals": refusals,
    "access_token": access_token,
    "refresh_token": token.get("refresh_token"),
    "id_token": id_token,
}
if "userinfo_endpoint" in metadata:
    info = requests.get(metadata["userinfo_endpoint"], headers={"Authorization": f"Bearer {access_token}"})
    assert info.status_code == 200, f"userinfo: {info.status_code} {info.text[:300]}"
    summary["userinfo"] = info.json()
    assert summary["userinfo"]["sub"] == claims["sub"], summary["userinfo"]
print(json.dumps(summary))
