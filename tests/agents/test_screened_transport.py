"""The a2a_proxy agent's calls are screened when they connect, not only when the card was read.

A remote card's interface URL is screened as the card is read; the a2a-sdk
client then calls it. A name that answered a public address to the screen
could answer an internal one to that connection (DNS rebinding), so every call
is screened again and sent to the address that was checked, with its Host.
"""

import asyncio
import contextlib
import gzip
import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest
from django.test import override_settings

from agents.builtin.a2a_proxy import RemoteTarget, remote_client
from agents.remote_cards import CredentialedClient, ScreenedTransport, origin_of
from tests import dns_server
from tests.dns_server import finishes_within

silent_dns = dns_server.silent_dns


def _read_body(handler: BaseHTTPRequestHandler) -> None:
    """Read the request's body: a socket closed with unread bytes in it is reset, not closed, and the
    reset can reach the client before it has read the whole answer (a ReadError, now and then)."""
    handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


class _Echo(BaseHTTPRequestHandler):
    """Answers a POST with the Host it was sent (reply())."""

    def do_POST(self):
        _read_body(self)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(self.reply().encode())

    def reply(self) -> str:
        return f"host={self.headers['Host']}"

    def log_message(self, *args):
        pass


@contextmanager
def _serving(handler):
    """An HTTP server with `handler` on a loopback port of its own: that port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def internal_service():
    with _serving(_Echo) as port:
        yield port


def _call(url: str) -> httpx.Response:
    async def call():
        async with httpx.AsyncClient(transport=ScreenedTransport(), trust_env=False) as client:
            return await client.post(url, json={})

    return asyncio.run(call())


class _Endless(BaseHTTPRequestHandler):
    """Answers 4 MiB: an event stream with no line feed (/stream), one of short events (/lines), a JSON
    body (/json); or a gzip-encoded answer (/gzip)."""

    def do_POST(self):
        _read_body(self)
        self.send_response(200)
        if self.path == "/gzip":
            body = gzip.compress(b"{}")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Content-Type", "application/json" if self.path == "/json" else "text/event-stream")
        self.end_headers()
        chunk = (b"data: " + b"x" * 1018 + b"\n\n") * 64 if self.path == "/lines" else b"x" * 65536
        try:
            for _ in range(64):  # 4 MiB, and the test's cap is 1 MiB
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def endless_service():
    with _serving(_Endless) as port:
        yield port


def test_an_answer_past_the_cap_fails_the_call_before_it_is_held_whole(endless_service):
    async def call(path: str) -> bytes:
        async with httpx.AsyncClient(transport=ScreenedTransport(), trust_env=False) as client:
            async with client.stream("POST", f"http://localhost:{endless_service}{path}", json={}) as answer:
                return await answer.aread()

    with override_settings(
        DEBUG=False, PROXY_ALLOW_PRIVATE_NETWORKS=True, PROXY_MAX_RESPONSE_BYTES=1024 * 1024
    ):
        with pytest.raises(httpx.RemoteProtocolError, match="more than 1048576 bytes in one line"):
            asyncio.run(call("/stream"))
        with pytest.raises(httpx.RemoteProtocolError, match="more than 1048576 bytes in one answer"):
            asyncio.run(call("/json"))
        # A long stream of ordinary events is no bigger in the SDK's hands than its longest line.
        assert len(asyncio.run(call("/lines"))) == 64 * 64 * 1026
        # Compressed, its size would say nothing of what it holds: refused, as it was not asked for.
        with pytest.raises(httpx.RemoteProtocolError, match="gzip-encoded"):
            asyncio.run(call("/gzip"))


def test_a_call_to_an_internal_address_is_refused_when_it_connects(internal_service):
    with override_settings(DEBUG=False, PROXY_ALLOW_PRIVATE_NETWORKS=False):
        for host in ("localhost", "127.0.0.1"):
            with pytest.raises(httpx.ConnectError, match="refused.*loopback"):
                _call(f"http://{host}:{internal_service}/rpc")


def test_an_allowed_call_goes_to_the_checked_address_with_its_host(internal_service):
    with override_settings(DEBUG=False, PROXY_ALLOW_PRIVATE_NETWORKS=True):
        answer = _call(f"http://localhost:{internal_service}/rpc")
    assert answer.status_code == 200
    assert answer.text == f"host=localhost:{internal_service}"


def test_a_call_to_a_name_dns_never_answers_fails_within_the_connect_timeout(silent_dns):
    async def call():
        timeout = httpx.Timeout(60, connect=0.5)
        async with httpx.AsyncClient(
            transport=ScreenedTransport(), timeout=timeout, trust_env=False
        ) as client:
            return await client.post("https://rpc.silent.test/a2a", json={})

    started = time.monotonic()
    with pytest.raises(httpx.ConnectError) as refused:
        finishes_within(10, asyncio.run, call())
    assert time.monotonic() - started < 2
    assert str(refused.value) == (
        "The call was refused: the host 'rpc.silent.test' did not resolve within 0.5 s"
    )
    assert silent_dns.wait_for_queries(1) == ["rpc.silent.test"]


class _Headers(_Echo):
    def reply(self) -> str:
        return f"key={self.headers.get('X-Api-Key')} accept={self.headers.get('Accept')}"


def test_the_configured_headers_go_to_the_configured_origins_only():
    # A proxy's API key is for the host its admin named: a card that lists an interface on another
    # host or port (its own, or a third party's) must not be handed the key with the calls.
    credentials = {"X-Api-Key": "sk-SECRET", "Accept": "text/plain"}

    async def call(url: str, origins: frozenset, **headers) -> str:
        client = CredentialedClient(
            credentials=credentials, origins=origins, transport=ScreenedTransport(), trust_env=False
        )
        async with client:
            return (await client.post(url, json={}, headers=headers)).text

    with (
        _serving(_Headers) as chosen,
        _serving(_Headers) as elsewhere,
        override_settings(DEBUG=False, PROXY_ALLOW_PRIVATE_NETWORKS=True),
    ):
        target = RemoteTarget(url=f"http://127.0.0.1:{chosen}/a2a/", headers=credentials)
        keyed, bare = "key=sk-SECRET accept=text/plain", "key=None accept=*/*"
        assert asyncio.run(call(f"http://127.0.0.1:{chosen}/rpc", target.origins)) == keyed
        assert asyncio.run(call(f"http://127.0.0.1:{elsewhere}/rpc", target.origins)) == bare
        assert asyncio.run(call(f"http://localhost:{chosen}/rpc", target.origins)) == bare
        # The request's own headers win over the configured ones, as over a client's (an SSE Accept).
        streamed = asyncio.run(
            call(f"http://127.0.0.1:{chosen}/rpc", target.origins, accept="text/event-stream")
        )
        assert streamed == "key=sk-SECRET accept=text/event-stream"
        # A card URL of the admin's is as trusted as the URL.
        on_card_host = RemoteTarget(url=target.url, card_url=f"http://127.0.0.1:{elsewhere}/card.json")
        assert asyncio.run(call(f"http://127.0.0.1:{elsewhere}/rpc", on_card_host.origins)) == keyed


def test_an_origin_is_one_whichever_way_its_url_spells_it():
    assert origin_of("HTTP://Agents.Example.COM:80/a") == ("http", "agents.example.com", 80)
    assert origin_of("http://agents.example.com./b") == ("http", "agents.example.com", 80)
    assert origin_of("https://[0:0::1]:443/") == origin_of("https://[::1]/") == ("https", "::1", 443)
    assert origin_of("http://example.com:8080/") != origin_of("https://example.com:8080/")


def test_a_proxy_sends_its_headers_to_a_card_interface_only_on_its_own_origin():
    # The proxy's client end to end: the card is read from the configured URL's host (with the
    # key). An interface it names on another port is called without the key, one on the
    # configured URL's origin with it.
    seen: dict[str, list] = {"card": [], "rpc": []}
    interface = {}

    class Remote(BaseHTTPRequestHandler):
        def do_GET(self):
            seen["card"].append(self.headers.get("X-Api-Key"))
            card = {
                "name": "Elsewhere",
                "description": "A card whose interface is on another port",
                "version": "1.0.0",
                "capabilities": {},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [],
                "supportedInterfaces": [
                    {
                        "url": f"http://127.0.0.1:{interface['port']}/rpc",
                        "protocolBinding": "JSONRPC",
                        "protocolVersion": "1.0",
                    }
                ],
            }
            self._answer(json.dumps(card))

        def do_POST(self):
            _read_body(self)
            seen["rpc"].append(self.headers.get("X-Api-Key"))
            self._answer(
                json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "no"}})
            )

        def _answer(self, body: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    async def send(target: RemoteTarget) -> None:
        async with remote_client(target, timeout=5) as client:
            request = SendMessageRequest(message=new_text_message("hi", role=Role.ROLE_USER))
            with contextlib.suppress(Exception):  # the answer is an error; the headers are the point
                async for _ in client.send_message(request):
                    pass

    with (
        _serving(Remote) as chosen,
        _serving(Remote) as other,
        override_settings(DEBUG=False, PROXY_ALLOW_PRIVATE_NETWORKS=True),
    ):
        target = RemoteTarget(url=f"http://127.0.0.1:{chosen}/a2a/", headers={"X-Api-Key": "sk-SECRET"})
        interface["port"] = other
        asyncio.run(send(target))
        assert seen == {"card": ["sk-SECRET"], "rpc": [None]}
        interface["port"] = chosen
        asyncio.run(send(target))
        assert seen == {"card": ["sk-SECRET"] * 2, "rpc": [None, "sk-SECRET"]}
