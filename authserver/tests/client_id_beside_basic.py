"""Token requests as third-party clients send them: HTTP Basic client authentication with the
client's `client_id` repeated in the body (requests-oauthlib's `include_client_id`,
django-oauth-toolkit, Keycloak), by python requests and by authlib's OAuth2Session.

Usage: client_id_beside_basic.py TOKEN_URL CLIENT_ID CLIENT_SECRET OTHER_CLIENT_ID

Prints JSON: for each request, the status, the `error` if any, and what was sent (Basic and
the body's client_id). Exits non-zero if a request did not carry both.
"""

import json
import sys
from urllib.parse import parse_qs

import requests
from authlib.integrations.requests_client import OAuth2Session


def summary(reply):
    sent = reply.request
    body = parse_qs(sent.body if isinstance(sent.body, str) else (sent.body or b"").decode())
    try:
        error = reply.json().get("error")
    except ValueError:
        error = None
    return {
        "status": reply.status_code,
        "error": error,
        "basic": sent.headers.get("Authorization", "").startswith("Basic "),
        "body_client_id": body.get("client_id", [None])[0],
        "www_authenticate": reply.headers.get("WWW-Authenticate"),
    }


def main():
    url, client_id, secret, other_id = sys.argv[1:]
    grant = {"grant_type": "client_credentials"}
    seen = {
        "requests_same": summary(
            requests.post(url, auth=(client_id, secret), data={**grant, "client_id": client_id})
        ),
        "requests_other": summary(
            requests.post(url, auth=(client_id, secret), data={**grant, "client_id": other_id})
        ),
    }
    session = OAuth2Session(client_id, secret, token_endpoint_auth_method="client_secret_basic")
    captured = {}
    session.register_compliance_hook(
        "access_token_response", lambda reply: captured.setdefault("reply", reply) or reply
    )
    try:
        session.fetch_token(url, grant_type="client_credentials", client_id=client_id)
    except Exception as error:  # an error answer: the summary below shows it
        captured.setdefault("exception", repr(error))
    seen["authlib_same"] = summary(captured["reply"]) if "reply" in captured else captured
    print(json.dumps(seen))
    for name in ("requests_same", "requests_other", "authlib_same"):
        if not (seen[name].get("basic") and seen[name].get("body_client_id")):
            sys.exit(f"{name} did not send Basic and client_id together: {seen[name]}")


if __name__ == "__main__":
    main()
