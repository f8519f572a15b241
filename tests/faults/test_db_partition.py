"""A partition between a worker and PostgreSQL at a batch's COMMIT: the turn goes on once the server lets go.

The COMMIT of a turn's batch never reaches the server, and the server is not
told (a dropped route, not a reset). The worker sees its connection fail and
tries the batch again on a new one, but the server's session still waits in
the old transaction, holding the task's and the turn's rows: the try, the
lease's renewals and any later attempt wait behind it, until PostgreSQL's own
keepalives end that session (two hours by default). The platform's
connections ask the server to end a session idle in a transaction for
DB_IDLE_IN_TRANSACTION_TIMEOUT seconds (3 here); the batch is then stored
once, and the turn completes.

The worker's connections go through tests/cutter.py's proxy, which holds each
round's first batch COMMIT ("held"); the web's are direct. Prepared
statements are off for the worker, so every batch statement carries the
table's name the proxy looks for.
"""

import os
import time
import uuid

import pytest

from tests.cutter import BATCH, CommitCutter
from tests.faults.harness import (
    TERMINAL,
    artifact_texts,
    client_duplicates,
    expected_chunks,
    get_task,
    log_holes,
    record,
    rpc,
    send_params,
)
from tests.live import database_env

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

ROUNDS = 3
IDLE_LIMIT = 3.0
# From the cut to the blocking answer: the server's IDLE_LIMIT, the batch's next try, the rest of
# the 1.5 s turn. Without the limit the turn stays held for as long as the proxy keeps the session.
ANSWER_LIMIT = 15.0


def test_a_batch_whose_commit_is_lost_in_a_partition_is_stored_once_and_its_turn_completes(stack):
    started = time.monotonic()
    web = stack.start_web()
    settings = stack.settings()
    cutter = CommitCutter(settings.get("HOST") or "127.0.0.1", int(settings.get("PORT") or 5432))
    try:
        through = {**settings, "HOST": "127.0.0.1", "PORT": cutter.port}
        stack.start_worker(
            env={
                **database_env(through),
                "DB_IDLE_IN_TRANSACTION_TIMEOUT": str(IDLE_LIMIT),
                "DB_PREPARE_THRESHOLD": "off",
            }
        )
        stack.start_beat()
        url = web.agent_url("fault-short")
        rounds = []
        for round_no in range(ROUNDS):
            text = f"partition {round_no}"
            cutter.arm("held", BATCH)
            sent = time.monotonic()
            answer = rpc(url, "SendMessage", send_params(text, f"partition-{round_no}-{uuid.uuid4()}"))
            answered = time.monotonic() - sent
            assert cutter.cut.is_set(), f"round {round_no}: no batch COMMIT went through the proxy: {answer}"
            assert cutter.ended.wait(10), f"round {round_no}: the server never ended the held session"
            assert answer.task, f"round {round_no}: {answer}"
            task_id = answer.task["id"]
            task = get_task(url, task_id)
            log = stack.store.logs([task_id])[task_id]
            rounds.append(
                {
                    "answered_s": answered,
                    "state": answer.task["status"]["state"],
                    "chunks_ok": artifact_texts(task) == expected_chunks(text),
                    "holes": log_holes(log, stack.store.event_seqs([task_id])[task_id]),
                    "duplicated": client_duplicates(task),
                    "stored_state": stack.store.states([task_id])[task_id],
                }
            )
    finally:
        cutter.close()

    figures = record(
        "db_partition",
        started,
        cuts=len(rounds),
        completed=sum(1 for r in rounds if r["state"] == "TASK_STATE_COMPLETED"),
        chunks_ok=sum(1 for r in rounds if r["chunks_ok"]),
        holes=sum(r["holes"] for r in rounds),
        duplicated=sum(r["duplicated"] for r in rounds),
        worst_answer_s=round(max(r["answered_s"] for r in rounds), 1),
        processes_exited=stack.exited(),
    )
    assert figures["completed"] == ROUNDS, rounds
    assert all(r["stored_state"] in TERMINAL for r in rounds), rounds
    assert figures["chunks_ok"] == ROUNDS, rounds
    assert (figures["holes"], figures["duplicated"]) == (0, 0), rounds
    assert figures["worst_answer_s"] < ANSWER_LIMIT, rounds
    assert figures["processes_exited"] == []
