"""Drives tokengate's authorization server with Authlib, a well-known third-party OAuth client.

Usage: authlib_client.py BASE_URL CLIENT_ID CLIENT_SECRET USERNAME PASSWORD
Exits non-zero (with an assertion message) when any step does not behave as RFC 6749/7662/7009 say.
"""
import sys

from authlib.integrations.requests_client import OAuth2Session

base, client_id, client_secret, username, password = sys.argv[1:6]
session = OAuth2Session(client_id, client_secret, token_endpoint_auth_method="client_secret_basic")

# Password grant, HTTP Basic client authentication (the seed's flow).
token = session.fetch_token(f"{base}/o/token/", grant_type="password", username=username, password=password)
assert token["token_type"] == "Bearer", token
assert token["scope"] == "read write groups", token
assert token["expires_in"] == 36000, token

# A narrower scope, as in the seed.
narrow = session.fetch_token(f"{base}/o/token/", grant_type="password", username=username, password=password, scope="read")
assert narrow["scope"] == "read", narrow

# Refresh with rotation.
refreshed = session.refresh_token(f"{base}/o/token/", refresh_token=token["refresh_token"])
assert refreshed["access_token"] != token["access_token"], refreshed

# Introspection (RFC 7662) with the client's credentials.
answer = session.introspect_token(f"{base}/o/introspect/", token=refreshed["access_token"]).json()
assert answer["active"] is True and answer["username"] == username and answer["client_id"] == client_id, answer
old = session.introspect_token(f"{base}/o/introspect/", token=token["access_token"]).json()
assert old == {"active": False}, old

# Revocation (RFC 7009), then the token is inactive.
response = session.revoke_token(f"{base}/o/revoke_token/", token=refreshed["access_token"])
assert response.status_code == 200, response.text
answer = session.introspect_token(f"{base}/o/introspect/", token=refreshed["access_token"]).json()
assert answer == {"active": False}, answer
print("authlib: password grant, refresh, introspection and revocation all behaved")
