"""The caller's address behind a proxy: X-Forwarded-For read from the right.

Each proxy appends the address it took the request from to X-Forwarded-For,
after whatever the client sent. So only the entries the trusted proxies wrote,
the last TRUSTED_PROXY_COUNT ones, say anything: the first of those is the
client as the outermost proxy saw it. Anything to their left is what the
client chose to send (Daphne's own --proxy-headers takes the leftmost entry,
which lets a client name its own address: a fresh rate-limit bucket, or
127.0.0.1 for /metrics).

The headers are read only when the connection comes from one of
TRUSTED_PROXIES; a client that reaches Daphne directly keeps its own address
and scheme, whatever it sends. The ASGI scope's `client` (Django's
REMOTE_ADDR) and `scheme` (from X-Forwarded-Proto, which the proxy must set:
Django's SECURE_PROXY_SSL_HEADER is not used, it believes any peer) are set
here, once, for HTTP and WebSocket.
"""

import ipaddress

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def forwarded_client(app):
    """`app` reading the client from trusted proxies' headers; `app` itself when TRUSTED_PROXY_COUNT is 0."""
    if settings.TRUSTED_PROXY_COUNT < 1:
        return app
    networks = [ipaddress.ip_network(item, strict=False) for item in settings.TRUSTED_PROXIES]
    return ForwardedClient(app, settings.TRUSTED_PROXY_COUNT, networks)


class ForwardedClient:
    """ASGI middleware: scope["client"] and ["scheme"] from the headers of `hops` trusted proxies."""

    def __init__(self, app, hops: int, proxies: list[Network]):
        self.app = app
        self.hops = hops
        self.proxies = proxies

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket") and self._from_proxy(scope.get("client")):
            scope = self._forwarded(scope)
        return await self.app(scope, receive, send)

    def _from_proxy(self, client) -> bool:
        peer = _ip(client[0]) if client else None
        return peer is not None and any(peer in network for network in self.proxies)

    def _forwarded(self, scope: dict) -> dict:
        scope = dict(scope)
        addresses = _values(scope, b"x-forwarded-for")
        # No header: the peer itself is the caller (a scrape of /metrics from the proxy's host).
        if addresses:
            scope["client"] = (_address(self._pick(addresses)), 0)
        protos = _values(scope, b"x-forwarded-proto")
        proto = self._pick(protos).lower() if protos else ""
        if proto in ("http", "https"):
            secure = proto == "https"
            scope["scheme"] = ("wss" if secure else "ws") if scope["type"] == "websocket" else proto
        return scope

    def _pick(self, entries: list[str]) -> str:
        """The entry the outermost trusted proxy wrote; with fewer, the leftmost (also a proxy's)."""
        return entries[-self.hops] if len(entries) >= self.hops else entries[0]


def _values(scope: dict, name: bytes) -> list[str]:
    """A header's comma-separated entries, every line of it in order (a proxy may add a line of its own)."""
    entries = []
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            entries += [entry.strip() for entry in value.decode("latin-1").split(",")]
    return [entry for entry in entries if entry]


def _ip(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d.
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def _address(entry: str) -> str:
    """An entry as an address: without a port ("a.b.c.d:p", "[v6]:p"); as written if it is none."""
    text = entry
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    address = _ip(text)
    return str(address) if address is not None else entry
