"""The MCP Python SDK's own client (`mcp` on PyPI), unmodified, calling a tool of an MCP server
behind tokengate's proxy: the SDK finds the protected resource metadata from the proxy's 401
(RFC 9728), the authorization server's metadata (RFC 8414), registers itself (RFC 7591), runs
the authorization code flow with PKCE and `resource` (RFC 8707), and calls the tool with the
token. The browser's part (sign in, consent) is played over HTTP by the redirect handler.

Usage: python3 mcp_client.py SERVER_URL USERNAME PASSWORD
Prints one JSON line: the tool's answer, the client id the SDK registered, the token's scope,
and every HTTP exchange the SDK made, in order.
"""

import asyncio
import html
import json
import re
import sys
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

SERVER_URL, USERNAME, PASSWORD = sys.argv[1], sys.argv[2], sys.argv[3]
REDIRECT_URI = "http://127.0.0.1:8976/callback"


class Memory:
    """Token storage of one run."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def hidden_fields(page: str, form_id: str) -> list[tuple[str, str]]:
    form = re.search(r'<form[^>]*id="%s".*?</form>' % form_id, page, re.S)
    assert form, page
    return [
        (html.unescape(name), html.unescape(value))
        for name, value in re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)"', form.group(0))
    ]


answer: dict[str, str] = {}


async def sign_in_and_consent(authorization_url: str) -> None:
    """What the user does in the browser: signs in, allows; the redirect's query is kept."""
    parts = urlsplit(authorization_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    with httpx.Client(base_url=origin, follow_redirects=False, timeout=10) as browser:
        login = browser.get("/accounts/login/")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', login.text).group(1)
        next_path = f"{parts.path}?{parts.query}"
        signed_in = browser.post(
            "/accounts/login/",
            data={"csrf_token": csrf, "username": USERNAME, "password": PASSWORD, "next": next_path},
        )
        assert signed_in.status_code == 303, signed_in.text
        consent = browser.get(signed_in.headers["location"])
        assert consent.status_code == 200, (consent.status_code, consent.headers, consent.text)
        fields = hidden_fields(consent.text, "consent") + [("decision", "allow")]
        # Repeated names (resource may be) as a list of pairs.
        allowed = browser.post(
            "/o/authorize/",
            content=urlencode(fields),
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert allowed.status_code == 303, allowed.text
    location = allowed.headers["location"]
    assert location.startswith(REDIRECT_URI), location
    query = parse_qs(urlsplit(location).query)
    answer.update({k: v[0] for k, v in query.items()})


async def callback() -> AuthorizationCodeResult:
    return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))


async def main() -> None:
    exchanges: list[str] = []

    async def record(response: httpx2.Response) -> None:
        request = response.request
        exchanges.append(f"{request.method} {request.url} -> {response.status_code}")

    storage = Memory()
    provider = OAuthClientProvider(
        server_url=SERVER_URL,
        client_metadata=OAuthClientMetadata(
            client_name="MCP SDK client",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=sign_in_and_consent,
        callback_handler=callback,
    )
    async with httpx2.AsyncClient(auth=provider, timeout=30, event_hooks={"response": [record]}) as http:
        async with streamable_http_client(SERVER_URL, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("add", {"a": 2, "b": 3})
    print(
        json.dumps(
            {
                "text": result.content[0].text,
                "is_error": bool(result.isError) if hasattr(result, "isError") else bool(result.is_error),
                "client_id": storage.client_info.client_id,
                "access_token": storage.tokens.access_token,
                "scope": storage.tokens.scope,
                "exchanges": exchanges,
            }
        )
    )


asyncio.run(main())
