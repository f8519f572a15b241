"""`manage.py webserve`: services mode's web tier as several Daphne processes on one port.

Every child serves A2A calls (the session's worker runs the turns); a child
killed with SIGKILL is replaced and the port keeps answering; SIGTERM stops
them all; a launcher killed with SIGKILL takes its children down, so the port
is free again.
"""

import http.client
import json
import os
import signal
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import SERVICES_MODE, user_message
from tests.live import (
    Platform,
    alive,
    child_env,
    children,
    free_port,
    http_ok,
    spawn,
    stop_processes,
    wait_for,
    wait_started,
    webserve_args,
)

pytestmark = pytest.mark.skipif(not SERVICES_MODE, reason="webserve is services mode's web tier")

PROCESSES = 2
# Connections opened to see every child take some: the kernel spreads them by a hash, so
# all 24 landing on one of two children has a chance of 2 in 2**24.
CONNECTIONS = 24


@pytest.fixture
def webserve(server, db_settings, log_dir):
    """A webserve of PROCESSES children on a port of its own; the session's worker runs its turns."""
    port = free_port()
    process = spawn("webserve", webserve_args(port, PROCESSES), child_env(db_settings), log_dir)
    platform = Platform(base_url=f"http://127.0.0.1:{port}", processes=[process])
    wait_started(process, lambda: http_ok(f"{platform.base_url}/readyz"), "webserve to serve")
    wait_for(lambda: len(children(process.popen.pid)) == PROCESSES, "every child to start")
    yield platform
    stop_processes(platform.processes)


def server_pid_of(client_port: int, server_port: int, candidates: list[int]) -> int | None:
    """Which of `candidates` holds the server side of the loopback connection from client_port."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1].split(":"), fields[2].split(":")
        if int(local[1], 16) == server_port and int(remote[1], 16) == client_port:
            inode = fields[9]
    if inode is None:
        return None
    for pid in candidates:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
            except OSError:
                continue
    return None


def port_of(platform: Platform) -> int:
    return int(platform.base_url.rsplit(":", 1)[1])


def send(connection: http.client.HTTPConnection, text: str) -> dict:
    """A blocking SendMessage to the echo agent on a kept-alive connection."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": user_message(text, str(uuid.uuid4())),
    }
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    connection.request("POST", "/a2a/demo/echo/", json.dumps(body), headers)
    response = connection.getresponse()
    assert response.status == 200
    return json.loads(response.read())


def assert_echoed(answer: dict, text: str) -> None:
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
    assert f"({text})" in task["artifacts"][0]["parts"][0]["text"]


def test_every_child_serves_calls_on_the_one_port(webserve):
    port = port_of(webserve)
    kids = children(webserve.processes[0].popen.pid)
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(CONNECTIONS)]
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: send(connections[i], f"web {i}"), range(CONNECTIONS)))
        for index, answer in enumerate(answers):
            assert_echoed(answer, f"web {index}")
        # Each connection is still open: which child holds its other end?
        served_by = {server_pid_of(c.sock.getsockname()[1], port, kids) for c in connections}
    finally:
        for connection in connections:
            connection.close()
    assert served_by == set(kids), (served_by, kids)


def test_a_killed_child_is_replaced_and_the_port_keeps_answering(webserve):
    launcher = webserve.processes[0].popen.pid
    before = children(launcher)
    os.kill(before[0], signal.SIGKILL)
    wait_for(
        lambda: before[0] not in children(launcher) and len(children(launcher)) == PROCESSES, "a new child"
    )
    assert before[1] in children(launcher)
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(lambda i: send_fresh(port_of(webserve), f"after kill {i}"), range(CONNECTIONS))
        )
    for index, answer in enumerate(answers):
        assert_echoed(answer, f"after kill {index}")
    assert f"Web process {before[0]} exited (-9)" in webserve.processes[0].output()


def send_fresh(port: int, text: str) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        return send(connection, text)
    finally:
        connection.close()


def test_sigterm_stops_every_child(webserve):
    launcher = webserve.processes[0]
    kids = children(launcher.popen.pid)
    launcher.popen.send_signal(signal.SIGTERM)
    assert launcher.popen.wait(timeout=20) == 0
    assert [pid for pid in kids if alive(pid)] == []
    assert "exited" not in launcher.output()  # stopped, not lost and started again


def test_a_launcher_killed_hard_takes_its_children_down_and_frees_the_port(webserve):
    launcher = webserve.processes[0]
    port = port_of(webserve)
    kids = children(launcher.popen.pid)
    launcher.popen.kill()
    launcher.popen.wait(timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in kids), "the children to exit")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
