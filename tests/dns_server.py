"""A DNS server on loopback that never answers, and the name lookup that asks it.

`silent_dns` puts a getaddrinfo in agents.outbound's place that sends names
under SILENT_DOMAIN as real DNS queries to a UDP server on 127.0.0.1 and waits
for the answer, which never comes: what a lookup does when the DNS server is
down or drops its packets. Other names resolve as usual. At teardown the
server lets the waiting lookups go (they fail), so no thread is left behind.
"""

import contextlib
import socket
import struct
import threading
import time

import pytest

from agents import outbound

SILENT_DOMAIN = "silent.test"


class SilentDns:
    def __init__(self):
        self.server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.server.bind(("127.0.0.1", 0))
        self.queries: list[str] = []
        self.clients: list[tuple[str, int]] = []
        self.asked = threading.Condition()
        self.thread = threading.Thread(target=self.take, daemon=True)
        self.thread.start()

    def take(self) -> None:
        """Read every query and answer none."""
        while True:
            try:
                packet, client = self.server.recvfrom(512)
            except OSError:
                return
            if packet == b"stop":
                return
            with self.asked:
                self.queries.append(query_name(packet))
                self.clients.append(client)
                self.asked.notify_all()

    def wait_for_queries(self, count: int, timeout: float = 5.0) -> list[str]:
        with self.asked:
            self.asked.wait_for(lambda: len(self.queries) >= count, timeout)
            return list(self.queries)

    def getaddrinfo(self, host, port, *args, **kwargs):
        if not str(host).rstrip(".").endswith(f".{SILENT_DOMAIN}"):
            return socket.getaddrinfo(host, port, *args, **kwargs)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            # A backstop only: each test lets its lookups go long before this.
            client.settimeout(120)
            client.sendto(query_packet(host), self.server.getsockname())
            client.recv(512)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    def release(self) -> None:
        """Let every waiting lookup go: each gets a datagram, and fails."""
        with self.asked:
            for client in self.clients:
                self.server.sendto(b"gone", client)
            self.clients.clear()

    def close(self) -> None:
        self.release()
        # Its lookups end before the next test: a lookup of the same name still under way would be
        # shared with that test's caller (agents.outbound) and answer it at once.
        deadline = time.monotonic() + 5
        while any(name.endswith(SILENT_DOMAIN) for name in outbound.lookups_waiting()):
            if time.monotonic() > deadline:
                break
            self.release()
            time.sleep(0.01)
        self.server.sendto(b"stop", self.server.getsockname())
        self.thread.join(5)
        self.server.close()


def query_packet(name: str) -> bytes:
    """A DNS query for the A record of `name` (RFC 1035 4.1)."""
    header = struct.pack("!HHHHHH", 0x2A2A, 0x0100, 1, 0, 0, 0)
    labels = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split("."))
    return header + labels + b"\x00" + struct.pack("!HH", 1, 1)


def query_name(packet: bytes) -> str:
    labels, at = [], 12
    while at < len(packet) and packet[at]:
        labels.append(packet[at + 1 : at + 1 + packet[at]].decode(errors="replace"))
        at += 1 + packet[at]
    return ".".join(labels)


@pytest.fixture
def silent_dns(monkeypatch):
    dns = SilentDns()
    monkeypatch.setattr(outbound, "getaddrinfo", dns.getaddrinfo)
    yield dns
    dns.close()


FULL_TENANT = 1


@pytest.fixture
def full_tenant(silent_dns, monkeypatch):
    """Tenant FULL_TENANT (a pk) with its whole share of lookups waiting on the silent server.

    Each of its names counts as a registrable domain of its own (all are under silent.test), as a
    tenant with many silent domains would have them: only the tenant's cap holds. Yields the pk.
    """
    monkeypatch.setattr(outbound, "MAX_LOOKUPS_PER_DOMAIN", outbound.MAX_LOOKUPS)

    def look_up(host: str) -> None:
        with outbound.lookups_for(FULL_TENANT), contextlib.suppress(outbound.UrlRefused):
            outbound.url_check(f"https://{host}/hook", allow_private=False, timeout=5)

    share = outbound.MAX_LOOKUPS_PER_TENANT
    waiting = [threading.Thread(target=look_up, args=(f"hook.d{n}.silent.test",)) for n in range(share)]
    for thread in waiting:
        thread.start()
    assert len(silent_dns.wait_for_queries(share)) == share
    yield FULL_TENANT
    silent_dns.release()
    for thread in waiting:
        thread.join(10)


def finishes_within(seconds: float, call, *args, **kwargs):
    """call(*args, **kwargs) on a thread of its own; the test fails if it is still running after `seconds`.

    Answers what it returned, raises what it raised: a lookup that hangs fails the test, not the run.
    """
    outcome: list = []

    def run():
        try:
            outcome.append((True, call(*args, **kwargs)))
        except BaseException as exc:
            outcome.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        pytest.fail(f"{getattr(call, '__name__', call)} was still waiting after {seconds:g} s")
    returned, value = outcome[0]
    if not returned:
        raise value
    return value
