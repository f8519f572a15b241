"""Daphne's WebSockets: a client gets time to answer the server's close.

When the server closes a socket (the console's feed closing with 4403 on a
revoked member), Autobahn, under Daphne, waits for the client's own close
frame for one second, then aborts the TCP connection. A browser that had not
read the server's close frame by then, under load, never reads it: the reset
goes first, and the page sees 1006 (gone, no reason) instead of the code that
says why, and reconnects instead of saying access is gone.

Daphne does not expose the option; `wait_for_closing_clients()` sets it on its
WebSocket factory, as Daphne sets its own options there.
"""

import functools

# A client that has not answered a close by then is gone: its connection is dropped.
CLOSE_HANDSHAKE_SECONDS = 10.0


def wait_for_closing_clients(seconds: float = CLOSE_HANDSHAKE_SECONDS) -> None:
    """Make Daphne's WebSocket factories wait `seconds` for a client's close frame."""
    from daphne.ws_protocol import WebSocketFactory

    if getattr(WebSocketFactory, "_a2a_close_handshake", None) is not None:
        return
    original = WebSocketFactory.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.setProtocolOptions(closeHandshakeTimeout=seconds)

    WebSocketFactory.__init__ = __init__
    WebSocketFactory._a2a_close_handshake = seconds
