"""The caller's address and scheme behind a proxy, for HTTP and WebSocket (ASGI).

X-Forwarded-For is read from the right, and only on connections from
TRUSTED_PROXIES (tenants/forwarded.py says why). The ASGI scope's `client`
(Django's REMOTE_ADDR) and `scheme` (from X-Forwarded-Proto, which the proxy
must set: Django's SECURE_PROXY_SSL_HEADER is not used, it believes any peer)
are set here, once, for HTTP and WebSocket.
"""

from django.conf import settings

from tenants.forwarded import TrustedProxies, entries, trusted_proxies


def forwarded_client(app):
    """`app` reading the client from trusted proxies' headers; `app` itself when TRUSTED_PROXY_COUNT is 0."""
    proxies = trusted_proxies(settings.TRUSTED_PROXY_COUNT)
    return app if proxies is None else ForwardedClient(app, proxies.hops, proxies.networks)


class ForwardedClient:
    """ASGI middleware: scope["client"] and ["scheme"] from the headers of `hops` trusted proxies."""

    def __init__(self, app, hops: int, proxies: list):
        self.app = app
        self.proxies = TrustedProxies(hops, proxies)

    async def __call__(self, scope, receive, send):
        client = scope.get("client")
        if scope["type"] in ("http", "websocket") and self.proxies.trusts(client[0] if client else None):
            scope = self._forwarded(scope)
        return await self.app(scope, receive, send)

    def _forwarded(self, scope: dict) -> dict:
        scope = dict(scope)
        addresses = _values(scope, b"x-forwarded-for")
        # No header: the peer itself is the caller (a scrape of /metrics from the proxy's host).
        if addresses:
            scope["client"] = (self.proxies.caller(scope["client"][0], addresses), 0)
        protos = _values(scope, b"x-forwarded-proto")
        proto = self.proxies.pick(protos).lower() if protos else ""
        if proto in ("http", "https"):
            secure = proto == "https"
            scope["scheme"] = ("wss" if secure else "ws") if scope["type"] == "websocket" else proto
        return scope


def _values(scope: dict, name: bytes) -> list[str]:
    """A header's comma-separated entries, every line of it in order (a proxy may add a line of its own)."""
    return entries(
        [value.decode("latin-1") for key, value in scope.get("headers", []) if key.lower() == name]
    )
