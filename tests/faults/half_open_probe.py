"""Run by test_half_open.py inside a network namespace of its own (`unshare -n`): not a test module.

It starts a throwaway PostgreSQL cluster in the namespace, connects to it
through Django with the platform's settings (a2a_platform/settings.py builds
the connection options from the environment it is given), and then makes the
server vanish without a word: a blackhole route swallows every packet sent to
the server's port, so nothing answers, not even with a reset, as when the
database's host dies or a failover moves its address. Two cases:

- sent: a statement sent after the server vanished;
- waiting: a statement in progress (pg_sleep) when it vanished.

It prints one JSON line: the seconds each case took to fail, or null if it
had not failed within the guard time given.
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.live import PostgresCluster  # noqa: E402

BLACKHOLE_TABLE = "199"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def vanish(port: int, gone: bool) -> None:
    """Swallow (or let through again) every packet sent to the server's port on this namespace's loopback."""
    rule = ["rule", "add" if gone else "del", "to", "127.0.0.1", "dport", str(port)]
    ip(*rule, "lookup", BLACKHOLE_TABLE, "pref", "1")


def timed_failure(port: int, statement: str, guard: float, vanish_after: float) -> dict:
    """Run `statement` on a new connection; the server vanishes `vanish_after` seconds after it is sent.

    vanish_after < 0: it vanishes before the statement is sent.
    """
    from django.db import connection

    ready, go = threading.Event(), threading.Event()
    outcome: dict = {}

    def run() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                ready.set()
                go.wait()
                outcome["sent_at"] = time.monotonic()
                cursor.execute(statement)
            outcome["answered"] = True
        except Exception as exc:  # the failure this probe waits for
            outcome["error"] = f"{exc.__class__.__name__}: {exc}"[:300]
        finally:
            outcome["ended_at"] = time.monotonic()
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not ready.wait(30):
        return {"seconds": None, "error": "no connection"}
    if vanish_after < 0:
        vanish(port, True)
        gone_at = time.monotonic()
        go.set()
    else:
        go.set()
        time.sleep(vanish_after)
        vanish(port, True)
        gone_at = time.monotonic()
    thread.join(guard)
    vanish(port, False)
    if "ended_at" not in outcome:
        return {"seconds": None, "error": f"still waiting after {guard:g} s"}
    return {"seconds": round(outcome["ended_at"] - gone_at, 2), "error": outcome.get("error")}


def main() -> None:
    log_dir, guard = Path(sys.argv[1]), float(sys.argv[2])
    ip("link", "set", "lo", "up")
    # The local table answers for 127.0.0.1 ahead of every rule at preference 0; put it after ours.
    ip("rule", "add", "from", "all", "lookup", "local", "pref", "2")
    ip("rule", "del", "pref", "0")
    ip("route", "add", "blackhole", "127.0.0.1", "table", BLACKHOLE_TABLE)
    cluster = PostgresCluster(log_dir)
    result = {}
    try:
        cluster.initdb()
        cluster.start()
        os.environ["DATABASE_URL"] = cluster.url("postgres")
        os.environ.pop("REDIS_URL", None)
        os.environ["DJANGO_SETTINGS_MODULE"] = "a2a_platform.settings"
        import django

        django.setup()
        from django.conf import settings

        options = settings.DATABASES["default"]["OPTIONS"]
        result["options"] = {k: v for k, v in options.items() if k.startswith(("keepalive", "tcp"))}
        result["sent"] = timed_failure(cluster.port, "SELECT 1", guard, vanish_after=-1)
        result["waiting"] = timed_failure(cluster.port, "SELECT pg_sleep(600)", guard, vanish_after=0.5)
    finally:
        cluster.destroy()
    print(json.dumps(result), flush=True)
    # A statement still waiting holds its thread and its pool: leave without waiting for them.
    os._exit(0)


if __name__ == "__main__":
    main()
