"""Fetching a remote A2A agent's card through the outbound URL screen.

The console's "Import agent" page, the a2a_proxy handler and the agent health
check read remote cards here. The card URL, and every interface URL the card
lists, pass the same screen as webhooks (agents/outbound.py) with the proxy's
settings: loopback is allowed while DEBUG is on (a local demo), private
addresses only with PROXY_ALLOW_PRIVATE_NETWORKS. The request goes to the
address that was checked, with no redirects and no proxies from the
environment, so the screen cannot be talked around. Host names are resolved
within the request's own timeout: a DNS server that never answers refuses the URL.
"""

import asyncio
import contextlib
import ipaddress
import json
from dataclasses import dataclass

import httpx
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from django.conf import settings
from google.protobuf.json_format import MessageToDict, ParseError

from agents.outbound import (
    LOOKUP_TIMEOUT,
    Target,
    UrlRefused,
    deadline,
    http_error_text,
    time_left,
    url_check,
)

CARD_PATH = ".well-known/agent-card.json"
# A card is a small JSON document; anything much bigger is not one.
MAX_CARD_BYTES = 1024 * 1024


class CardUnavailable(Exception):
    """The card could not be read or used; the message says why, for a form or a status."""


def proxy_url_check(url: str, *, timeout: float = LOOKUP_TIMEOUT) -> Target:
    """The outbound screen with the settings of agent proxies (UrlRefused names the setting).

    The host must resolve within `timeout` seconds.
    """
    return url_check(
        url,
        timeout=timeout,
        allow_private=settings.PROXY_ALLOW_PRIVATE_NETWORKS,
        allow_loopback=settings.DEBUG,
        purpose="proxied calls are",
        setting="PROXY_ALLOW_PRIVATE_NETWORKS",
    )


def origin_of(url: str | httpx.URL) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, as one host is spelled whichever way it was written.

    httpx gives the scheme and name in lower case (IDNA-encoded) and leaves a default port out.
    """
    url = httpx.URL(url)
    host = url.host.rstrip(".")
    with contextlib.suppress(ValueError):
        host = ipaddress.ip_address(host).compressed
    return url.scheme, host, url.port or (443 if url.scheme == "https" else 80)


class CredentialedClient(httpx.AsyncClient):
    """An httpx client that adds `credentials` (an a2a_proxy's configured headers, its API key) to
    its requests to `origins` alone: those of the URLs the proxy's admin chose.

    The card's interface URLs are the remote's to say: a card that names another
    host gets nothing it was not meant to have. A request's own headers (the
    SDK's Accept for a stream, say) win over the credentials, as they would over
    a client's headers.
    """

    def __init__(self, *, credentials: dict[str, str], origins: frozenset, **kwargs):
        super().__init__(**kwargs)
        self.credentials, self.origins = httpx.Headers(credentials), origins

    def build_request(self, method, url, *, headers=None, **kwargs) -> httpx.Request:
        if self.credentials and origin_of(url) in self.origins:
            merged = httpx.Headers(self.credentials)
            merged.update(httpx.Headers(headers))
            headers = merged
        return super().build_request(method, url, headers=headers, **kwargs)


class ScreenedTransport(httpx.AsyncHTTPTransport):
    """Every request screened as it goes (proxy_url_check) and sent to the address it checked.

    For the a2a-sdk client of an a2a_proxy agent, which calls the interface
    URLs a remote card lists. Screened once when the card was read, a name
    could answer a public address to the screen and an internal one to the
    connection (DNS rebinding). Here the screen and the connection use the
    same answer; the Host header and TLS's server name stay the URL's.
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # Resolving the name is part of connecting: it gets the client's connect timeout.
        timeout = (request.extensions.get("timeout") or {}).get("connect") or LOOKUP_TIMEOUT
        try:
            target = await asyncio.to_thread(proxy_url_check, str(request.url), timeout=timeout)
        except UrlRefused as exc:
            raise httpx.ConnectError(f"The call was refused: {exc}", request=request) from None
        request.extensions = {**request.extensions, **target.extensions}
        request.url = target.pinned_url
        # Bytes as they come, so the cap below counts what the SDK will hold.
        request.headers["Accept-Encoding"] = "identity"
        response = await super().handle_async_request(request)
        encoding = response.headers.get("Content-Encoding", "").strip().lower() or "identity"
        if encoding != "identity":
            await response.aclose()
            raise httpx.RemoteProtocolError(
                f"the remote agent answered {encoding}-encoded, which was not asked for", request=request
            )
        events = response.headers.get("Content-Type", "").lower().startswith("text/event-stream")
        response.stream = _Capped(
            response.stream, settings.PROXY_MAX_RESPONSE_BYTES, request, per_line=events
        )
        return response


class _Capped(httpx.AsyncByteStream):
    """A response body that may not hold more than `limit` bytes at once in the SDK's hands.

    The SDK reads a whole answer, or an SSE line, into memory before it looks at it: a
    remote agent sending without end would take the worker, and every turn on it, down.
    An answer counts whole; an event stream (per_line) counts each line, so a long one
    of ordinary events goes on.
    """

    def __init__(self, stream: httpx.AsyncByteStream, limit: int, request: httpx.Request, *, per_line: bool):
        self.stream, self.limit, self.request, self.per_line = stream, limit, request, per_line

    async def __aiter__(self):
        held = 0
        async for chunk in self.stream:
            ends = max(chunk.rfind(b"\n"), chunk.rfind(b"\r")) if self.per_line else -1
            held = len(chunk) - ends - 1 if ends >= 0 else held + len(chunk)
            if held > self.limit:
                what = "in one line of its stream" if self.per_line else "in one answer"
                raise httpx.RemoteProtocolError(
                    f"the remote agent sent more than {self.limit} bytes {what} (PROXY_MAX_RESPONSE_BYTES)",
                    request=self.request,
                )
            yield chunk

    async def aclose(self) -> None:
        await self.stream.aclose()


def card_url_of(agent_url: str) -> str:
    """Where an agent's card is by convention: <url>/.well-known/agent-card.json."""
    return f"{agent_url.rstrip('/')}/{CARD_PATH}"


@dataclass(frozen=True)
class RemoteCard:
    card: AgentCard
    # The card as the platform read it (1.0 ProtoJSON, a 0.3 card converted), for previews.
    data: dict

    @property
    def jsonrpc_url(self) -> str:
        """The URL of the card's JSON-RPC interface, the newest protocol version first."""
        interfaces = [i for i in self.card.supported_interfaces if i.protocol_binding.upper() == "JSONRPC"]
        interfaces.sort(key=lambda i: _version_key(i.protocol_version), reverse=True)
        return interfaces[0].url if interfaces else ""


def _version_key(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return (0,)


def card_fetch(url: str, *, headers: dict[str, str] | None = None, timeout: float = 5.0) -> RemoteCard:
    """GET and parse the card at `url` (A2A 1.0 or 0.3); raises CardUnavailable saying why.

    Within `timeout` seconds in all: the card's lookup, its GET and its interfaces' lookups. (A read
    under way when the time is up may end it later, by at most what was left when the GET started.)
    """
    with deadline(timeout):
        return _card_fetch(url, headers, timeout)


def _card_fetch(url: str, headers: dict[str, str] | None, timeout: float) -> RemoteCard:
    try:
        target = proxy_url_check(url, timeout=timeout)
    except UrlRefused as exc:
        raise CardUnavailable(f"The card URL is refused: {exc}.") from None
    sent = {**(headers or {}), "Accept": "application/json"}
    try:
        with httpx.Client(timeout=max(time_left(timeout), 0.01), trust_env=False) as client:
            url = target.pinned_url
            request = target.request(client, "GET", headers=sent)
            response = client.send(request, stream=True, follow_redirects=False)
            try:
                if response.status_code != 200:
                    raise CardUnavailable(
                        f"{url} answered HTTP {response.status_code} {response.reason_phrase}, not a card."
                    )
                body = b""
                for chunk in response.iter_bytes():
                    body += chunk
                    # httpx's timeout is per read: a card sent a few bytes at a time
                    # would take as long as the server liked.
                    if time_left(timeout) <= 0:
                        raise CardUnavailable(f"{url} did not send its card within {timeout:g} s.")
                    if len(body) > MAX_CARD_BYTES:
                        raise CardUnavailable(f"{url} sent more than {MAX_CARD_BYTES} bytes: not a card.")
            finally:
                response.close()
    except httpx.TimeoutException:
        raise CardUnavailable(f"{url} did not answer within {timeout:g} s.") from None
    except httpx.HTTPError as exc:
        raise CardUnavailable(f"{url} could not be reached: {http_error_text(exc)}.") from None
    return card_parse(body, url, timeout=timeout)


def card_parse(body: bytes, url: str = "the card", *, timeout: float = LOOKUP_TIMEOUT) -> RemoteCard:
    """Parse a card and screen its JSON-RPC interfaces, whose hosts resolve within `timeout` seconds."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CardUnavailable(f"{url} did not answer with JSON: it is not an agent card.") from None
    try:
        card = parse_agent_card(data)
    except (ParseError, TypeError, ValueError, AttributeError) as exc:
        raise CardUnavailable(f"{url} is not a valid A2A agent card: {exc}") from None
    if not card.name or not card.supported_interfaces:
        raise CardUnavailable(f"{url} is not a usable A2A agent card: it has no name or no interfaces.")
    # Every URL the client may call later passes the screen too: a card must not point
    # the platform at its own network. The proxy speaks JSON-RPC only (an empty
    # supported_protocol_bindings means JSONRPC to the SDK client), so a gRPC
    # interface (host:port, no scheme) is never called and not screened.
    # One deadline for them all: a card listing many names of a silent DNS server holds no one long.
    with deadline(timeout):
        for interface in card.supported_interfaces:
            if interface.protocol_binding.upper() != "JSONRPC":
                continue
            try:
                proxy_url_check(interface.url, timeout=timeout)
            except UrlRefused as exc:
                raise CardUnavailable(f"The card's interface {interface.url} is refused: {exc}.") from None
    return RemoteCard(card=card, data=MessageToDict(card))
