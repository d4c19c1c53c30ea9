"""The OAuth proof: the official Python MCP SDK's OAuth client provider against the built-in
authorization server, with no bearer token given to it. The integration test
(tests/it/oauth.rs) starts the service and a learner with a started session, then runs

    python oauth.py --url http://127.0.0.1:PORT/mcp --sign-in-key KEY

The SDK discovers everything itself: the 401 challenge → protected-resource metadata →
authorization-server metadata → dynamic client registration → authorization with PKCE. Its
redirect handler is the learner's browser, driven headlessly with plain HTTP: the sign-in page
(the learner's key), then the consent page (Allow). The SDK exchanges the code, lists the
tools, plays golden journey "a", and finally forces a refresh (rotation) and calls again.
Prints one JSON document with what it saw; exits non-zero on the first broken expectation.
"""

import argparse
import asyncio
import html
import json
import re
import sys
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

sys.path.insert(0, str(Path(__file__).parent))
from golden import JOURNEYS, Coach, check  # noqa: E402

REDIRECT_URI = "http://127.0.0.1:9/callback"


class MemoryStorage:
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def hidden_fields(page: str) -> dict:
    fields = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page):
        fields[name] = html.unescape(value)
    return fields


class Browser:
    """The learner's browser: follows the authorization URL, signs in, consents."""

    def __init__(self, sign_in_key: str):
        self.key = sign_in_key
        self.callback = None
        self.pages = []

    async def open(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False) as web:
            page = await web.get(authorization_url)
            check(page.status_code == 200 and 'action="/sign-in"' in page.text, f"sign-in page first: {page.status_code}")
            self.pages.append("sign-in")
            form = hidden_fields(page.text)
            form["token"] = self.key
            signed_in = await web.post(urljoin(authorization_url, "/sign-in"), data=form)
            check(signed_in.status_code in (302, 303), f"sign-in redirects back: {signed_in.status_code}")
            back = urljoin(authorization_url, signed_in.headers["location"])
            check(urlparse(back).path == "/oauth/authorize", f"back to the authorization request: {back}")
            consent = await web.get(back)
            check(consent.status_code == 200 and 'action="/oauth/authorize"' in consent.text, "consent page")
            check(consent.headers.get("x-frame-options") == "DENY", "the consent page cannot be framed")
            self.pages.append("consent")
            form = hidden_fields(consent.text)
            form["decision"] = "allow"
            decided = await web.post(urljoin(authorization_url, "/oauth/authorize"), data=form)
            check(decided.status_code in (302, 303), f"consent redirects to the client: {decided.status_code}")
            location = decided.headers["location"]
            check(location.startswith(REDIRECT_URI + "?"), f"exactly the registered redirect URI: {location}")
            self.callback = parse_qs(urlparse(location).query)

    async def result(self) -> AuthorizationCodeResult:
        check(self.callback is not None and "code" in self.callback, "an authorization code came back")
        return AuthorizationCodeResult(code=self.callback["code"][0], state=self.callback.get("state", [None])[0])


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--sign-in-key", required=True)
    args = parser.parse_args()

    storage = MemoryStorage()
    browser = Browser(args.sign_in_key)
    auth = OAuthClientProvider(
        server_url=args.url,
        client_metadata=OAuthClientMetadata(
            client_name="SDK proof client",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.result,
    )
    seen = {}
    http = create_mcp_http_client(auth=auth)
    async with http:
        async with streamable_http_client(args.url, http_client=http, terminate_on_close=False) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                tools = await session.list_tools()
                check(len(tools.tools) == 10, "ten tools after authorization")
                seen["pages"] = browser.pages
                seen["registered"] = storage.client is not None and storage.client.client_id is not None
                seen["client_id"] = storage.client.client_id
                seen["scope"] = storage.tokens.scope if storage.tokens else None
                first_access = storage.tokens.access_token
                first_refresh = storage.tokens.refresh_token
                coach = Coach(session)
                await JOURNEYS["a"](coach)
                seen["calls"] = coach.calls
                # Force a refresh: the provider rotates the refresh token and calls again.
                auth.context.token_expiry_time = 1
                await session.list_tools()
                check(storage.tokens.access_token != first_access, "a new access token after refresh")
                check(storage.tokens.refresh_token != first_refresh, "the refresh token rotated")
                seen["refreshed"] = True
                seen["spent_refresh_token"] = first_refresh
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main())
