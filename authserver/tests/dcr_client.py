"""A client nobody here wrote registering itself: RFC 7591 registration with an initial access
token (requests), the RFC 8414 metadata read first to find the registration endpoint, the
registration read back with its registration access token (RFC 7592), then Authlib's
OAuth2Session using the new client for the client credentials grant (client_secret_basic), and
finally the registration deleted (RFC 7592).

Usage: dcr_client.py BASE_URL INITIAL_ACCESS_TOKEN

Prints a JSON summary on its last line; exits non-zero at the first deviation.
"""

import json
import sys

import requests
from authlib.integrations.requests_client import OAuth2Session

base, initial_token = sys.argv[1:3]


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


metadata = requests.get(f"{base}/.well-known/oauth-authorization-server", timeout=10).json()
endpoint = metadata.get("registration_endpoint")
if not endpoint:
    fail(f"no registration_endpoint in {metadata}")

registered = requests.post(
    endpoint,
    json={
        "client_name": "authlib service",
        "grant_types": ["client_credentials"],
        "token_endpoint_auth_method": "client_secret_basic",
        "scope": "read",
    },
    headers={"Authorization": f"Bearer {initial_token}"},
    timeout=10,
)
if registered.status_code != 201:
    fail(f"registration: {registered.status_code} {registered.text}")
client = registered.json()
for field in ("client_id", "client_secret", "registration_access_token", "registration_client_uri"):
    if field not in client:
        fail(f"no {field} in {client}")
if client.get("client_secret_expires_at") != 0:
    fail(f"client_secret_expires_at: {client}")

management = {"Authorization": f"Bearer {client['registration_access_token']}"}
read_back = requests.get(client["registration_client_uri"], headers=management, timeout=10)
if read_back.status_code != 200:
    fail(f"read back: {read_back.status_code} {read_back.text}")

session = OAuth2Session(
    client["client_id"],
    client["client_secret"],
    token_endpoint_auth_method="client_secret_basic",
    scope="read",
)
token = session.fetch_token(metadata["token_endpoint"], grant_type="client_credentials")
if not token.get("access_token"):
    fail(f"no access token: {token}")

deleted = requests.delete(client["registration_client_uri"], headers=management, timeout=10)
again = requests.post(
    metadata["token_endpoint"],
    auth=(client["client_id"], client["client_secret"]),
    data={"grant_type": "client_credentials"},
    timeout=10,
)
if again.status_code != 401:
    fail(f"a deleted client still gets tokens: {again.status_code} {again.text}")

print(
    json.dumps(
        {
            "client_id": client["client_id"],
            "read_back": read_back.json(),
            "token": {"token_type": token.get("token_type"), "scope": token.get("scope")},
            "deleted": deleted.status_code,
        }
    )
)
