"""The caller's address behind a proxy: X-Forwarded-For as the trusted proxies wrote it, from the right.

Over real HTTP, the platform as deployed behind a proxy (`webserve --proxy-headers`
in services mode; `serve` with TRUSTED_PROXY_COUNT on the embedded default), with
the proxy at 127.0.0.2: this test plays it, connecting from that address and
appending the address it "took the request from" after what the client sent, as
nginx's $proxy_add_x_forwarded_for does. A connection from 127.0.0.1 is a client
that reaches Daphne directly. What the address decides, visibly: /metrics answers
loopback callers only (no METRICS_TOKEN here), and anonymous callers of a public
agent have a rate each, by address.
"""

import contextlib
import socket
import threading
import uuid

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc

from a2a_platform.forwarded import ForwardedClient, forwarded_client
from tests.api.tenancy import new_message
from tests.conftest import SERVICES_MODE
from tests.live import (
    Platform,
    child_env,
    free_port,
    http_ok,
    spawn,
    start_web,
    stop_processes,
    wait_started,
    webserve_args,
)
from tests.tasks_app.test_quotas import fresh_minute, make_tenant

PROXY = "127.0.0.2"
CLIENT = "203.0.113.7"


@pytest.fixture(scope="module")
def proxied(db_settings, log_dir, server):
    """The web tier trusting one proxy, at PROXY; the session's worker runs its turns."""
    env = {"TRUSTED_PROXIES": PROXY, "METRICS_TOKEN": ""}
    if not SERVICES_MODE:
        platform = start_web(
            db_settings, log_dir, name="web-proxied", extra_env=env | {"TRUSTED_PROXY_COUNT": "1"}
        )
        yield platform
        platform.stop()
        return
    port = free_port()
    args = [*webserve_args(port, processes=1), "--proxy-headers"]
    process = spawn("webserve-proxied", args, child_env(db_settings, env), log_dir)
    platform = Platform(base_url=f"http://127.0.0.1:{port}", processes=[process])
    wait_started(process, lambda: http_ok(f"{platform.base_url}/readyz"), "webserve to serve")
    yield platform
    stop_processes(platform.processes)


@pytest.fixture
def via_proxy():
    with httpx.Client(transport=httpx.HTTPTransport(local_address=PROXY), timeout=30) as client:
        yield client


@pytest.fixture
def direct():
    with httpx.Client(timeout=30) as client:
        yield client


def forwarded(sent_by_client: str | None = None, seen_by_proxy: str = CLIENT) -> dict:
    """The header as the proxy passes it on: what the client sent, then the address it saw."""
    chain = f"{sent_by_client}, {seen_by_proxy}" if sent_by_client else seen_by_proxy
    return {"X-Forwarded-For": chain}


def test_a_client_behind_the_proxy_cannot_pass_for_loopback(proxied, via_proxy):
    metrics = f"{proxied.base_url}/metrics"
    assert via_proxy.get(metrics, headers=forwarded("127.0.0.1")).status_code == 403
    assert via_proxy.get(metrics, headers=forwarded("::1")).status_code == 403
    # Also not with the header sent twice, the client's line first.
    twice = [("X-Forwarded-For", "127.0.0.1"), ("X-Forwarded-For", CLIENT)]
    assert via_proxy.get(metrics, headers=twice).status_code == 403
    # A caller the proxy itself took from loopback is one.
    assert via_proxy.get(metrics, headers=forwarded(CLIENT, "127.0.0.1")).status_code == 200


def test_a_client_reaching_daphne_directly_keeps_its_own_address(proxied, direct):
    # It is no proxy: whatever it says, its address is the connection's (loopback here).
    answer = direct.get(f"{proxied.base_url}/metrics", headers=forwarded(seen_by_proxy=CLIENT))
    assert answer.status_code == 200


def send(client: httpx.Client, platform: Platform, tenant, headers: dict) -> httpx.Response:
    body = new_message("hi") | {"configuration": {"returnImmediately": True}}
    url = f"{platform.base_url}/a2a/{tenant.slug}/open/rest/message:send"
    return client.post(url, json=body, headers={"A2A-Version": "1.0", **headers})


def test_a_client_behind_the_proxy_cannot_take_a_fresh_rate_by_naming_another_address(
    proxied, via_proxy, stored
):
    tenant = make_tenant(rate_limit_per_minute=2)
    fresh_minute()
    for pretended in ("198.51.100.1", "198.51.100.2"):
        assert send(via_proxy, proxied, tenant, forwarded(pretended)).status_code == 200
    refused = send(via_proxy, proxied, tenant, forwarded("198.51.100.3"))
    assert refused.status_code == 429
    assert refused.json()["error"]["details"][0]["reason"] == "RATE_LIMIT_EXCEEDED"
    # Another client behind the same proxy has a minute of its own.
    assert send(via_proxy, proxied, tenant, forwarded(seen_by_proxy="203.0.113.8")).status_code == 200


def test_a_direct_client_cannot_take_a_fresh_rate_with_the_header(proxied, direct, stored):
    tenant = make_tenant(rate_limit_per_minute=2)
    fresh_minute()
    for pretended in ("198.51.100.1", "198.51.100.2"):
        assert send(direct, proxied, tenant, forwarded(seen_by_proxy=pretended)).status_code == 200
    assert send(direct, proxied, tenant, forwarded(seen_by_proxy="198.51.100.3")).status_code == 429


@pytest.fixture(scope="module")
def in_production(db_settings, log_dir, server):
    """A web process as deployed behind a TLS proxy: DEBUG off, one trusted proxy at PROXY."""
    env = {
        "TRUSTED_PROXIES": PROXY,
        "TRUSTED_PROXY_COUNT": "1",
        "DEBUG": "false",
        "SECRET_KEY": "proxy-headers-test-only-" + "x" * 40,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PUBLIC_BASE_URL": "",
    }
    platform = start_web(db_settings, log_dir, name="web-production", extra_env=env)
    yield platform
    platform.stop()


def test_only_the_proxy_says_the_request_came_over_https(in_production, via_proxy, direct):
    # The agent card names the URL callers reached, scheme included: https only if the proxy says so.
    card = f"{in_production.base_url}/a2a/demo/echo/.well-known/agent-card.json"
    https = {"X-Forwarded-Proto": "https"}
    said_by_proxy = via_proxy.get(card, headers=https | forwarded())
    assert said_by_proxy.status_code == 200, said_by_proxy.text
    assert said_by_proxy.json()["supportedInterfaces"][0]["url"].startswith("https://")
    # A client that reaches Daphne directly says what it likes; Django's own proxy header setting
    # would have believed it (a card, redirects and secure-only checks all on "https").
    said_by_client = direct.get(card, headers=https)
    assert said_by_client.status_code == 200, said_by_client.text
    assert said_by_client.json()["supportedInterfaces"][0]["url"].startswith("http://127.0.0.1:")


# --- The middleware's reading of the headers -------------------------------------------------


async def scope_seen(app_factory, client: str, headers: list[tuple[str, str]], kind: str = "http") -> dict:
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    scope = {
        "type": kind,
        "scheme": "ws" if kind == "websocket" else "http",
        "client": (client, 40000),
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers],
    }
    await app_factory(app)(scope, None, None)
    return seen


def trusting(hops: int, proxies: str = "10.0.0.0/8"):
    import ipaddress

    networks = [ipaddress.ip_network(item) for item in proxies.split(",")]
    return lambda app: ForwardedClient(app, hops, networks)


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        ("1.2.3.4, 5.6.7.8", "5.6.7.8"),
        ("5.6.7.8:4431", "5.6.7.8"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("1.2.3.4,2001:DB8::1", "2001:db8::1"),
        ("unknown", "unknown"),
    ],
)
async def test_one_proxy_names_the_rightmost_entry(chain, expected):
    seen = await scope_seen(trusting(1), "10.0.0.5", [("X-Forwarded-For", chain)])
    assert seen["client"][0] == expected


async def test_two_proxies_name_the_second_entry_from_the_right():
    chain = "127.0.0.1, 198.51.100.9, 10.1.1.1"
    seen = await scope_seen(trusting(2), "10.0.0.5", [("X-Forwarded-For", chain)])
    assert seen["client"][0] == "198.51.100.9"
    # One entry only (the outer proxy was bypassed): the one the inner proxy wrote.
    seen = await scope_seen(trusting(2), "10.0.0.5", [("X-Forwarded-For", "198.51.100.9")])
    assert seen["client"][0] == "198.51.100.9"


async def test_headers_from_a_peer_that_is_no_proxy_are_ignored():
    headers = [("X-Forwarded-For", "127.0.0.1"), ("X-Forwarded-Proto", "https")]
    seen = await scope_seen(trusting(1), "192.0.2.1", headers)
    assert seen["client"] == ("192.0.2.1", 40000) and seen["scheme"] == "http"


async def test_a_proxy_without_the_header_is_the_caller_itself():
    seen = await scope_seen(trusting(1), "10.0.0.5", [])
    assert seen["client"] == ("10.0.0.5", 40000)


async def test_the_scheme_follows_x_forwarded_proto():
    headers = [("X-Forwarded-For", "198.51.100.9"), ("X-Forwarded-Proto", "https")]
    assert (await scope_seen(trusting(1), "10.0.0.5", headers))["scheme"] == "https"
    assert (await scope_seen(trusting(1), "10.0.0.5", headers, kind="websocket"))["scheme"] == "wss"
    odd = [("X-Forwarded-For", "198.51.100.9"), ("X-Forwarded-Proto", "gopher")]
    assert (await scope_seen(trusting(1), "10.0.0.5", odd))["scheme"] == "http"


async def test_the_scheme_comes_from_the_proxy_even_without_x_forwarded_for():
    seen = await scope_seen(trusting(1), "10.0.0.5", [("X-Forwarded-Proto", "https")])
    assert seen["scheme"] == "https" and seen["client"] == ("10.0.0.5", 40000)


async def test_by_default_no_header_is_trusted_and_then_loopback_is_the_proxy(settings):
    def app(scope, receive, send):
        pass

    assert forwarded_client(app) is app
    settings.TRUSTED_PROXY_COUNT = 1
    seen = await scope_seen(forwarded_client, "127.0.0.1", [("X-Forwarded-For", "127.0.0.1, 198.51.100.9")])
    assert seen["client"][0] == "198.51.100.9"
    seen = await scope_seen(forwarded_client, "192.168.1.1", [("X-Forwarded-For", "127.0.0.1")])
    assert seen["client"][0] == "192.168.1.1"


# --- The gRPC binding behind a proxy -------------------------------------------------


class TcpProxy:
    """A TCP forwarder on loopback whose connections to `target` come from `source`: the proxy's address."""

    def __init__(self, target: str, source: str):
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.source = source
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket()
            upstream.bind((self.source, 0))
            upstream.connect(self.target)
            for reader, writer in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(reader, writer), daemon=True).start()

    @staticmethod
    def _pump(reader: socket.socket, writer: socket.socket) -> None:
        try:
            while data := reader.recv(65536):
                writer.sendall(data)
        except OSError:
            pass
        finally:
            for end in (reader, writer):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.listener.close()


@pytest.fixture(scope="module")
def proxied_grpc(db_settings, log_dir, server):
    """The gRPC binding trusting one proxy, at PROXY (and a web process beside it, as it is deployed)."""
    env = {"TRUSTED_PROXIES": PROXY, "GRPC_TRUSTED_PROXY_COUNT": "1"}
    platform = start_web(db_settings, log_dir, name="web-proxied-grpc", grpc=True, extra_env=env)
    proxy = TcpProxy(platform.grpc_target, PROXY)
    yield platform, proxy
    proxy.close()
    platform.stop()


def grpc_send(target: str, tenant, forwarded_for: list[str]) -> grpc.StatusCode:
    """One anonymous SendMessage to the tenant's open agent over `target`; the status it got."""
    message = pb.Message(role=pb.Role.ROLE_USER, message_id=f"msg-{uuid.uuid4()}", parts=[pb.Part(text="hi")])
    request = pb.SendMessageRequest(
        message=message,
        tenant=f"{tenant.slug}/open",
        configuration=pb.SendMessageConfiguration(return_immediately=True),
    )
    metadata = [("a2a-version", "1.0"), *(("x-forwarded-for", value) for value in forwarded_for)]
    with grpc.insecure_channel(target) as channel:
        try:
            a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(request, metadata=metadata, timeout=30)
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def test_grpc_callers_behind_the_proxy_have_a_rate_each_and_cannot_name_their_own(proxied_grpc, stored):
    _, proxy = proxied_grpc
    tenant = make_tenant(rate_limit_per_minute=2)
    fresh_minute()
    # What a client sends goes left of what the proxy appends: the proxy's entry counts.
    for pretended in ("198.51.100.1", "198.51.100.2"):
        assert grpc_send(proxy.address, tenant, [f"{pretended}, {CLIENT}"]) == grpc.StatusCode.OK
    assert grpc_send(proxy.address, tenant, [f"198.51.100.3, {CLIENT}"]) == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Another caller behind the same proxy has a minute of its own; before this, all of them shared one.
    assert grpc_send(proxy.address, tenant, ["203.0.113.8"]) == grpc.StatusCode.OK


def test_a_grpc_caller_reaching_the_binding_directly_cannot_take_a_fresh_rate(proxied_grpc, stored):
    platform, _ = proxied_grpc
    tenant = make_tenant(rate_limit_per_minute=2)
    fresh_minute()
    for pretended in ("198.51.100.1", "198.51.100.2"):
        assert grpc_send(platform.grpc_target, tenant, [pretended]) == grpc.StatusCode.OK
    assert grpc_send(platform.grpc_target, tenant, ["198.51.100.3"]) == grpc.StatusCode.RESOURCE_EXHAUSTED
