"""A database whose server vanishes without a word fails the statement within seconds, not minutes.

When PostgreSQL's host dies, or a failover moves its address, nothing sends a
reset: a statement sent then waits for the kernel to give up on the
connection (about 15 minutes on Linux), and one already waiting for its
answer waits for ever. The thread making it (a worker thread holding an
agent's turn, a web request's database thread) is held all that time. The
platform sets libpq's TCP user timeout and keepalives on every connection
(a2a_platform/settings.py, DB_TCP_USER_TIMEOUT and DB_KEEPALIVES_*).

half_open_probe.py runs in a network namespace of its own (`unshare -n`,
as root: only its own loopback is touched) with a throwaway cluster, and
makes the server vanish with a blackhole route. With the settings (short
here), both statements fail within seconds; with them turned off, the same
probe shows both still waiting when it gives up, so the fault is the real one.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.harness import record

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

PROBE = Path(__file__).with_name("half_open_probe.py")
SHORT = {
    "DB_TCP_USER_TIMEOUT": "2",
    "DB_KEEPALIVES_IDLE": "1",
    "DB_KEEPALIVES_INTERVAL": "1",
    "DB_KEEPALIVES_COUNT": "2",
}
OFF = {"DB_TCP_USER_TIMEOUT": "0", "DB_KEEPALIVES_IDLE": "0"}
# The user timeout is checked as the kernel retransmits (0.2 s, then doubling): a 2 s timeout ends
# a statement sent into the void within about 6 s, a keepalive-bound wait within about 3 s.
FAILS_WITHIN = 10.0
GUARD = 8.0  # how long the probe with the settings off waits: long past FAILS_WITHIN


def probe(settings: dict, guard: float, log_dir: Path) -> dict:
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs a network namespace of its own (unshare -n, as root)")
    env = {**os.environ, **settings}
    done = subprocess.run(
        ["unshare", "-n", sys.executable, str(PROBE), str(log_dir), str(guard)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"the probe failed: {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_statement_to_a_server_that_vanished_fails_within_seconds(faults_log_dir):
    started = time.monotonic()
    kept = probe(SHORT, FAILS_WITHIN + 5, faults_log_dir)
    control = probe(OFF, GUARD, faults_log_dir)
    figures = record(
        "half_open",
        started,
        sent_fails_s=kept["sent"]["seconds"],
        waiting_fails_s=kept["waiting"]["seconds"],
        without_settings=[control["sent"]["error"], control["waiting"]["error"]],
    )
    # The fault is real: without the settings nothing fails (no reset, no answer).
    assert control["sent"]["seconds"] is None and control["waiting"]["seconds"] is None, control
    for case in ("sent", "waiting"):
        seconds = kept[case]["seconds"]
        assert seconds is not None and seconds <= FAILS_WITHIN, f"{case}: {kept[case]} ({figures})"
        assert "timed out" in kept[case]["error"], kept[case]
