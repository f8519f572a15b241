"""kill -9 the web process under an open stream; Last-Event-ID on another one misses nothing.

Two Daphne processes share the test's Redis and database. Each round streams a
3 s progress task from one, kills it after the client read 1, 2, ... events
(the client reads on until the connection breaks, as a real one would), then
resubscribes on the other with the last id it got, and a replacement web
process is started for the next round.
"""

import os
import time
import uuid

import pytest

from tests.faults.harness import StreamRun, open_stream, record, send_params, stream_all, stream_faults

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="fault tests run with the services-mode suite (REDIS_URL set)"
)

ROUNDS = 6


def test_a_stream_resumed_on_another_web_process_after_a_kill_has_every_event_once(stack):
    started = time.monotonic()
    webs = [stack.start_web("web-a"), stack.start_web("web-b")]
    stack.start_worker()
    stack.start_beat()
    outcomes = []
    for round_no in range(ROUNDS):
        doomed, other = webs
        message_id = f"web-kill-{round_no}-{uuid.uuid4()}"
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
        body["params"] = send_params(f"stream {round_no}", message_id)
        first = StreamRun(message_id)
        reader = open_stream(
            doomed.agent_url("fault-progress"),
            body,
            first,
            stop_after=lambda run, n=round_no + 1: len(run.ids()) >= n,
        )
        next(reader, None)  # returns once the client has read round_no + 1 events, the stream still open
        killed_at = stack.kill(doomed.processes[0])
        for _ in reader:  # whatever was already on its way, until the connection breaks
            pass
        assert first.events, f"round {round_no}: the stream sent nothing: {first}"
        task_id = first.events[0]["data"]["result"]["task"]["id"]
        resume = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}}
        headers = {"Last-Event-ID": str(first.ids()[-1])}
        second = stream_all(other.agent_url("fault-progress"), resume, StreamRun(message_id), headers)
        seen = StreamRun(message_id, events=first.events + second.events)
        faults = stream_faults(seen, stack.store.logs([task_id])[task_id])
        faults["resume_s"] = (second.first_event_at or float("inf")) - killed_at
        faults["error"] = second.error or second.transport_error
        outcomes.append(faults)
        webs = [other, stack.start_web(f"web-{round_no}")]

    figures = record(
        "web_kill",
        started,
        kills=len(outcomes),
        submitted=len(outcomes),
        completed=sum(1 for o in outcomes if o["ended_final"]),
        failed=sum(1 for o in outcomes if o["error"]),
        lost=sum(o["missing"] for o in outcomes),
        duplicated=sum(o["duplicated"] for o in outcomes),
        altered=sum(o["altered"] + o["out_of_order"] for o in outcomes),
        worst_resume_s=round(max(o["resume_s"] for o in outcomes), 1),
        processes_exited=stack.exited(),
    )
    assert figures["completed"] == ROUNDS, [o for o in outcomes if not o["ended_final"]]
    assert (figures["lost"], figures["duplicated"], figures["altered"], figures["failed"]) == (0, 0, 0, 0)
    assert figures["processes_exited"] == []
