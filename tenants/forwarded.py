"""The caller's address behind proxies: forwarded-for entries read from the right.

Each proxy appends the address it took the request from to X-Forwarded-For
(gRPC proxies: the `x-forwarded-for` metadata), after whatever the client
sent. So only the entries the trusted proxies wrote, the last
TRUSTED_PROXY_COUNT ones, say anything: the first of those is the client as
the outermost proxy saw it. Anything to their left is what the client chose to
send (Daphne's own --proxy-headers takes the leftmost entry, which lets a
client name its own address: a fresh rate-limit bucket, or 127.0.0.1 for
/metrics).

The entries count only on connections from TRUSTED_PROXIES; a client that
reaches the platform directly keeps its own address, whatever it sends. The
HTTP side (a2a_platform/forwarded.py) and the gRPC binding
(tasks_app/protocol/grpc_binding.py) both read them through TrustedProxies.
"""

import ipaddress

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class TrustedProxies:
    """`hops` proxies in front, each at an address of `networks`."""

    def __init__(self, hops: int, networks: list[Network]):
        self.hops = hops
        self.networks = networks

    def trusts(self, peer: str | None) -> bool:
        """Whether a connection from `peer` (an address as text) comes from a trusted proxy."""
        address = ip(peer) if peer else None
        return address is not None and any(address in network for network in self.networks)

    def pick(self, entries: list[str]) -> str:
        """The entry the outermost trusted proxy wrote; with fewer, the leftmost (also a proxy's)."""
        return entries[-self.hops] if len(entries) >= self.hops else entries[0]

    def caller(self, peer: str, forwarded_for: list[str]) -> str:
        """The caller: named by the entries when `peer` is a trusted proxy that sent any, else `peer`."""
        if forwarded_for and self.trusts(peer):
            return address_of(self.pick(forwarded_for))
        return peer


def trusted_proxies(hops: int) -> TrustedProxies | None:
    """`hops` proxies at TRUSTED_PROXIES; None when `hops` is 0 (no entry is read).

    The HTTP side's count is TRUSTED_PROXY_COUNT, the gRPC binding's
    GRPC_TRUSTED_PROXY_COUNT: gRPC is often reached directly where HTTP has a
    proxy in front, and a direct caller trusted as a proxy names its own address.
    """
    if hops < 1:
        return None
    networks = [ipaddress.ip_network(item, strict=False) for item in settings.TRUSTED_PROXIES]
    return TrustedProxies(hops, networks)


def entries(values: list[str]) -> list[str]:
    """The comma-separated entries of a header's lines (or metadata values), in order."""
    found = []
    for value in values:
        found += [entry.strip() for entry in value.split(",")]
    return [entry for entry in found if entry]


def ip(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d.
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def address_of(entry: str) -> str:
    """An entry as an address: without a port ("a.b.c.d:p", "[v6]:p"); as written if it is none."""
    text = entry
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    address = ip(text)
    return str(address) if address is not None else entry
