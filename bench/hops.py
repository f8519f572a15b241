"""One blocking SendMessage to the services-mode platform, hop by hop.

    .venv/bin/python bench/hops.py

Starts the platform in services mode the way bench/run.py does (webserve + a
separate Celery worker, a PostgreSQL database of its own, Redis db 5), sends
`--warmup` unmeasured requests, then ONE blocking SendMessage, and prints:

- a timeline: the client's send and receive times against the `created_at`
  (and `turn_started_at`) stamps the platform stored for that task, its
  messages, artifacts and TaskEvent log rows (tasks_app/models.py). All
  processes run on this machine, so the clocks are the same clock;
- the PostgreSQL work of that one request, from counters that need no
  extension: transactions committed and rolled back (`pg_stat_database`) and
  rows inserted/updated/deleted per table (`pg_stat_user_tables`), as deltas
  around the request minus the same deltas over an idle window of the same
  length (the platform's own background work and this script's reads).

PostgreSQL 15 backends flush their counters when idle, at the latest after
10 s: hence the waits of `--settle` seconds around the request.
"""

import argparse
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import (  # noqa: E402
    HEADERS,
    PLATFORM_DB,
    drop_database,
    pg_connect,
    prepare_platform,
    start_platform,
)
from tests.live import stop_processes  # noqa: E402


def send_body() -> dict:
    return {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex[:12],
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": "hi"}]}
        },
    }


def counters(args) -> dict:
    """Cumulative PostgreSQL counters of the platform's database, read on a new connection."""
    with pg_connect(args) as conn:
        commits, rollbacks = conn.execute(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = %s", (PLATFORM_DB,)
        ).fetchone()
    with pg_connect(args, PLATFORM_DB) as conn:
        tables = conn.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, seq_scan, coalesce(idx_scan, 0) "
            "FROM pg_stat_user_tables"
        ).fetchall()
    result = {"xact_commit": commits, "xact_rollback": rollbacks}
    for name, ins, upd, dele, seq_scan, idx_scan in tables:
        result[f"{name} rows inserted"] = ins
        result[f"{name} rows updated"] = upd
        result[f"{name} rows deleted"] = dele
        result[f"{name} index scans"] = idx_scan
        result[f"{name} seq scans"] = seq_scan
    return result


def delta(after: dict, before: dict) -> dict:
    return {key: after.get(key, 0) - before.get(key, 0) for key in after}


def state_of(payload: dict) -> str:
    for key in ("statusUpdate", "task"):
        if key in payload:
            return (payload[key].get("status") or {}).get("state", "").replace("TASK_STATE_", "")
    return ""


def timeline(args, task_id: str, sent: datetime, received: datetime) -> list[tuple[datetime, str]]:
    with pg_connect(args, PLATFORM_DB) as conn:
        marks = [(sent, "client sends SendMessage")]
        created, updated = conn.execute(
            "SELECT created_at, updated_at FROM tasks_app_task WHERE id = %s", (task_id,)
        ).fetchone()
        marks.append((created, "Task row created (accept transaction)"))
        for role, at, turn_at in conn.execute(
            "SELECT role, created_at, turn_started_at FROM tasks_app_message WHERE task_id = %s", (task_id,)
        ):
            marks.append((at, f"Message ({role}) created"))
            if turn_at:
                marks.append((turn_at, "turn claimed by the worker (Message.turn_started_at)"))
        for (at,) in conn.execute("SELECT created_at FROM tasks_app_artifact WHERE task_id = %s", (task_id,)):
            marks.append((at, "Artifact row created"))
        for seq, kind, payload, at in conn.execute(
            "SELECT seq, kind, payload, created_at FROM tasks_app_taskevent WHERE task_id = %s ORDER BY seq",
            (task_id,),
        ):
            marks.append((at, f"TaskEvent #{seq} {kind} {state_of(payload)}".rstrip()))
        marks.append((updated, "Task row last updated"))
        marks.append((received, "client has the answer"))
    return sorted(marks, key=lambda mark: mark[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warmup", type=int, default=30, help="unmeasured blocking sends first")
    parser.add_argument(
        "--settle", type=float, default=11.0, help="seconds for PostgreSQL to flush its counters"
    )
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    args = parser.parse_args(argv)

    work_dir = Path(tempfile.mkdtemp(prefix="a2a-hops-"))
    server = None
    try:
        print("Starting the platform (services mode) ...", file=sys.stderr, flush=True)
        env = prepare_platform(args, "services", work_dir / "var")
        server = start_platform("services", env, work_dir)
        with httpx.Client(timeout=30, trust_env=False) as client:
            for _ in range(args.warmup):
                # A connection each: the kernel spreads them over webserve's Daphne processes, so
                # every one is warm (its pools and broker connection made) before the one measured.
                with httpx.Client(timeout=30, trust_env=False) as fresh:
                    fresh.post(server.rpc_url, json=send_body(), headers=HEADERS).raise_for_status()
            print(
                f"Warm-up done; waiting {3 * args.settle:.0f} s for PostgreSQL's counters ...",
                file=sys.stderr,
            )
            time.sleep(args.settle)
            idle_start = counters(args)
            time.sleep(args.settle)
            idle_end = counters(args)
            t0 = time.perf_counter()
            sent = datetime.now(UTC)
            response = client.post(server.rpc_url, json=send_body(), headers=HEADERS)
            elapsed = time.perf_counter() - t0
            received = datetime.now(UTC)
            response.raise_for_status()
            time.sleep(args.settle)
            after = counters(args)
        task = response.json()["result"]["task"]
        marks = timeline(args, task["id"], sent, received)
    finally:
        if server is not None:
            stop_processes(server.procs)
        drop_database(args, PLATFORM_DB)

    state = task["status"]["state"]
    print(f"\nOne blocking SendMessage, services mode; answered {state} in {elapsed * 1000:.1f} ms")
    print(f"\n{'ms since send':>14}{'+ms':>8}  hop")
    previous = sent
    for at, what in marks:
        since, step = (at - sent).total_seconds() * 1000, (at - previous).total_seconds() * 1000
        print(f"{since:>14.1f}{step:>8.1f}  {what}")
        previous = at
    idle, busy = delta(idle_end, idle_start), delta(after, idle_end)
    print(
        f"\nPostgreSQL for this request (the request's window minus an idle window of {args.settle:.0f} s):"
    )
    for key in busy:
        value = busy[key] - idle.get(key, 0)
        if value or key.startswith("xact"):
            print(f"  {key:<40}{value:>5}   (window {busy[key]}, idle {idle.get(key, 0)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
