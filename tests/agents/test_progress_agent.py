import asyncio
import time

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import GetTaskRequest, Role, SendMessageRequest, TaskState
from asgiref.sync import sync_to_async

from tasks_app.models import Message, TaskEvent
from tests.agents.conftest import new_id
from tests.conftest import user_message

DURATION = 1.5
SLOW_DURATION = 4.0


@pytest.fixture
def progress(demo_agent) -> str:
    return demo_agent("progress-quick", "progress", {"duration": DURATION})


def test_it_is_seeded_as_a_public_demo_agent(server):
    card = httpx.get(server.agent_url("progress") + ".well-known/agent-card.json").json()
    assert card["skills"][0]["id"] == "progress"
    assert card["capabilities"]["streaming"] is True


async def test_sdk_streaming_client_sees_progress_and_artifact_chunks_then_completion(server, progress):
    client = await create_client(server.agent_url(progress), client_config=ClientConfig(streaming=True))
    started = time.monotonic()
    try:
        request = SendMessageRequest(message=new_text_message("crunch", role=Role.ROLE_USER))
        events = [event async for event in client.send_message(request)]
    finally:
        await client.close()
    elapsed = time.monotonic() - started

    statuses = [e.status_update.status for e in events if e.HasField("status_update")]
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    working = [s for s in statuses if s.state == TaskState.TASK_STATE_WORKING]
    assert len(working) >= 3
    assert all(s.message.parts[0].text for s in working)
    assert len(chunks) >= 2
    assert not chunks[0].append
    assert all(chunk.append for chunk in chunks[1:])
    assert [chunk.last_chunk for chunk in chunks] == [False] * (len(chunks) - 1) + [True]
    assert len({chunk.artifact.artifact_id for chunk in chunks}) == 1
    assert statuses[-1].state == TaskState.TASK_STATE_COMPLETED
    assert events[-1].HasField("status_update")
    # The work is spread over the configured duration, not sent in one burst.
    assert elapsed >= DURATION * 0.9

    # GetTask shows one artifact holding every chunk's parts, in order.
    task_id = events[0].task.id
    client = await create_client(server.agent_url(progress), client_config=ClientConfig(streaming=False))
    try:
        task = await client.get_task(GetTaskRequest(id=task_id))
    finally:
        await client.close()
    assert len(task.artifacts) == 1
    assert list(task.artifacts[0].parts) == [part for chunk in chunks for part in chunk.artifact.parts]


@pytest.fixture
def slow_progress(demo_agent) -> str:
    # Long enough that a turn ending soon after the cancel proves the agent stopped.
    return demo_agent("progress-slow", "progress", {"duration": SLOW_DURATION})


async def test_cancel_stops_a_running_task_quickly_and_nothing_follows_the_canceled_event(
    server, slow_progress
):
    progress = slow_progress
    async with httpx.AsyncClient(headers={"A2A-Version": "1.0"}, timeout=30) as http:

        async def call(method: str, params: dict) -> dict:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            return (await http.post(server.agent_url(progress), json=body)).json()

        params = {**user_message("long job", new_id()), "configuration": {"returnImmediately": True}}
        task_id = (await call("SendMessage", params))["result"]["task"]["id"]
        # Cancel once the agent is demonstrably running (its first WORKING update is stored).
        deadline = time.monotonic() + 10
        while not await _is_working(task_id):
            assert time.monotonic() < deadline, "the progress agent never started"
            await asyncio.sleep(0.05)

        started = time.monotonic()
        canceled = await call("CancelTask", {"id": task_id})
        assert time.monotonic() - started < 2.0
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        # The worker stops the agent at once rather than letting it run out its time.
        while not await _turn_done(task_id):
            assert time.monotonic() - started < 2.0, "the agent kept running after the cancel"
            await asyncio.sleep(0.05)

        # Wait past the time the agent would have needed to finish.
        await asyncio.sleep(SLOW_DURATION + 0.5 - (time.monotonic() - started))
        fetched = (await call("GetTask", {"id": task_id}))["result"]
    assert fetched["status"]["state"] == "TASK_STATE_CANCELED"
    log = await _log(task_id)
    _, last_payload = log[-1]
    assert last_payload["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    states = [p["statusUpdate"]["status"]["state"] for _, p in log if "statusUpdate" in p]
    assert "TASK_STATE_COMPLETED" not in states
    assert states.count("TASK_STATE_CANCELED") == 1


async def _log(task_id: str) -> list[tuple[int, dict]]:
    return await sync_to_async(
        lambda: list(TaskEvent.objects.filter(task_id=task_id).order_by("seq").values_list("seq", "payload"))
    )()


async def _turn_done(task_id: str) -> bool:
    return await sync_to_async(
        lambda: Message.objects.filter(task_id=task_id, role="user", turn=Message.Turn.DONE).exists()
    )()


async def _is_working(task_id: str) -> bool:
    return any(
        payload.get("statusUpdate", {}).get("status", {}).get("state") == "TASK_STATE_WORKING"
        for _, payload in await _log(task_id)
    )


def test_two_tasks_run_side_by_side_and_both_complete(rpc, progress):
    # Regression: in services mode two turns in one worker process used to share
    # one Redis channel-layer object, and one of them was aborted.
    task_ids = []
    for _ in range(2):
        params = {**user_message("side by side", new_id()), "configuration": {"returnImmediately": True}}
        task_ids.append(rpc("SendMessage", params, agent=progress)["result"]["task"]["id"])
    deadline = time.monotonic() + DURATION + 10
    states = []
    while time.monotonic() < deadline:
        states = [rpc("GetTask", {"id": i}, agent=progress)["result"]["status"]["state"] for i in task_ids]
        if all(state in {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED"} for state in states):
            break
        time.sleep(0.2)
    assert states == ["TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"]
