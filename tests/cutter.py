"""A TCP proxy to PostgreSQL that cuts a connection at the COMMIT of a transaction that wrote a given table.

What a lost COMMIT does to the platform: test_accept_commit_lost.py cuts a web's
(sends, cancels, webhook configs), tests/faults/test_db_partition.py a worker's
(a turn's batch). It imports no application code.
"""

import socket
import threading
import time

# psycopg commits with a simple query: 'Q', its length, the text and a NUL.
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
# What a send's accept (or a cancel) writes: a connection that wrote it is a web's sending one.
ACCEPT = b'"tasks_app_message"'
# What CreateTaskPushNotificationConfig writes.
PUSH_CONFIG = b'"tasks_app_pushconfig"'
# What a turn's batch writes (its log entries).
BATCH = b'"tasks_app_taskevent"'
MARKERS = (ACCEPT, PUSH_CONFIG, BATCH)


def _drop(sock: socket.socket) -> None:
    """Close a connection now: a thread blocked reading it wakes, and its peer sees it end
    (a bare close() leaves it open while another thread is in recv() on it)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected (any more)
    sock.close()


class CommitCutter:
    """A TCP proxy to PostgreSQL; armed, it cuts the next connection that commits an accept, at its COMMIT.

    "after": the COMMIT goes on to the server and its answer never comes back.
    "after, and away": so, and every other connection of the web drops, and no new one gets through
    for 8 s.
    "late": the web's end drops first, and the COMMIT reaches the server only after the web has
    asked the store about it (a COMMIT still on its way, or slow to finish, as the web asks).
    "before": the connection is dropped and the COMMIT never reaches the server.
    "before, and away": so, and the database is away for 8 s as for "after, and away".
    "held": the web's end drops and the COMMIT never reaches the server, which is not told either
    (a partition): its session waits in its transaction, holding its locks, until the server ends
    it (`ended` is set then).
    """

    def __init__(self, host: str, port: int):
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed: str | None = None
        self.marker = ACCEPT
        # Until then (time.monotonic()) new connections are dropped at once: the database is away.
        self.refuse_until = 0.0
        self.closed = False
        self.cut = threading.Event()
        # Set when the web asks PostgreSQL whether the session that was committing is done.
        self.asked = threading.Event()
        # "held": the server's end of the cut connection, and set once the server has closed it.
        self.held: socket.socket | None = None
        self.ended = threading.Event()
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.clients: list[socket.socket] = []
        threading.Thread(target=self.accept, daemon=True).start()

    def arm(self, mode: str, marker: bytes = ACCEPT) -> None:
        """Cut the next COMMIT of a connection that has written `marker` (a table's name)."""
        with self.lock:
            self.armed = mode
            self.marker = marker
            self.cut.clear()
            self.asked.clear()
            self.ended.clear()

    def away(self, seconds: float) -> None:
        """The database goes away: every web connection drops, and no new one gets through for `seconds`."""
        with self.lock:
            self.refuse_until = time.monotonic() + seconds
            for sock in self.clients:  # the web's ends; the server's stay, for the COMMIT under way
                _drop(sock)

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self.refuse_until:
                _drop(client)
                continue
            server = socket.create_connection(self.upstream)
            with self.lock:
                if self.closed:  # taken as close() ran
                    _drop(client)
                    _drop(server)
                    return
                if time.monotonic() < self.refuse_until:  # it went away while this one connected
                    _drop(client)
                    _drop(server)
                    continue
                self.sockets += [client, server]
                self.clients.append(client)
            # Set, the server's answers no longer reach the web (the COMMIT's, once it is cut).
            muted = threading.Event()
            threading.Thread(target=self.to_server, args=(client, server, muted), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, muted), daemon=True).start()

    def to_server(self, client: socket.socket, server: socket.socket, muted: threading.Event) -> None:
        seen: set[bytes] = set()  # the markers the connection's open transaction has written
        while chunk := self.read(client):
            seen.update(marker for marker in MARKERS if marker in chunk)
            if b"pg_stat_activity" in chunk:
                self.asked.set()
            with self.lock:
                mode = self.armed if self.marker in seen and COMMIT in chunk else None
                if mode is not None:
                    self.armed = None
            if COMMIT in chunk:
                seen.clear()  # the next transaction of the connection starts clean
            if mode in ("after", "after, and away", "late"):
                muted.set()  # not the COMMIT's answer either
                if mode == "late":
                    # The web's end drops first; the COMMIT reaches the server only once the web
                    # has asked about the session (or after 5 s), and has been told it is busy.
                    _drop(client)
                    self.cut.set()
                    self.asked.wait(5)
                    time.sleep(0.5)
                server.sendall(chunk)
                if mode == "after, and away":
                    self.away(8)  # this connection's web end too, with every other one
                else:
                    _drop(client)
                self.cut.set()
                time.sleep(1)  # the server reads the COMMIT and commits before it sees the drop
                _drop(server)
                return
            if mode == "held":
                muted.set()
                self.held = server  # pump() sees the server end it
                _drop(client)
                self.cut.set()
                return
            if mode in ("before", "before, and away"):
                if mode == "before, and away":
                    self.away(8)
                _drop(client)
                _drop(server)
                self.cut.set()
                return
            try:
                server.sendall(chunk)
            except OSError:
                return
        _drop(server)

    def pump(self, source: socket.socket, target: socket.socket, muted: threading.Event) -> None:
        while chunk := self.read(source):
            if muted.is_set():
                continue
            try:
                target.sendall(chunk)
            except OSError:
                return
        if source is self.held:
            self.ended.set()
        _drop(target)

    @staticmethod
    def read(sock: socket.socket) -> bytes:
        try:
            return sock.recv(65536)
        except OSError:
            return b""

    def close(self) -> None:
        """Stop taking connections (a shut-down listener wakes the thread in accept()) and drop every one."""
        with self.lock:
            self.closed = True
            for sock in self.sockets:
                _drop(sock)
        _drop(self.listener)
