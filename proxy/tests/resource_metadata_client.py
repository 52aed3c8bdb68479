"""A client nobody here wrote (httpx, requests) discovers a protected API the way RFC 9728 and
the MCP authorization specification describe: it calls the API without a token, reads
`resource_metadata` from the 401's WWW-Authenticate, fetches that document, checks that its
`resource` is the API it called (RFC 9728 §3.3), then calls with the token it holds for that
resource and with one for another API.

usage: resource_metadata_client.py API_URL RESOURCE TOKEN_FOR_IT TOKEN_FOR_ANOTHER
Prints one JSON line: what it saw.
"""

import json
import re
import sys

import httpx
import requests


def challenge_params(header):
    """The auth-params of a Bearer challenge (RFC 9110 §11.2), quoted strings unescaped."""
    scheme, _, rest = header.partition(" ")
    assert scheme.lower() == "bearer", header
    params = {}
    for m in re.finditer(r'([A-Za-z_]+)="((?:[^"\\]|\\.)*)"', rest):
        params[m.group(1)] = re.sub(r"\\(.)", r"\1", m.group(2))
    return params


def main():
    api, resource, good, other = sys.argv[1:5]
    seen = {}
    first = requests.get(api, timeout=5)
    seen["no_token"] = first.status_code
    params = challenge_params(first.headers["WWW-Authenticate"])
    seen["challenge"] = params
    url = params["resource_metadata"]
    with httpx.Client(timeout=5) as client:
        meta = client.get(url, headers={"Origin": "https://elsewhere.example"})
        meta.raise_for_status()
        seen["metadata_cors"] = meta.headers.get("access-control-allow-origin")
        seen["metadata"] = meta.json()
        # RFC 9728 §3.3: the document must be about the resource the client asked for.
        if seen["metadata"]["resource"] != resource:
            raise SystemExit(f"metadata is about {seen['metadata']['resource']}, not {resource}")
        scope = params.get("scope", "")
        assert set(scope.split()) <= set(seen["metadata"]["scopes_supported"]), scope
        ok = client.get(api, headers={"Authorization": f"Bearer {good}"})
        seen["own_token"] = ok.status_code
        refused = client.get(api, headers={"Authorization": f"Bearer {other}"})
        seen["other_token"] = refused.status_code
        seen["other_challenge"] = challenge_params(refused.headers["WWW-Authenticate"])
    print(json.dumps(seen))


main()
