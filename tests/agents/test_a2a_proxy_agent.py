import time

import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from agents.builtin.clarify import QUESTION
from tasks_app.models import Task
from tests.agents.conftest import artifact_text, new_id, status_text
from tests.conftest import user_message
from tests.live import free_port


def remote_task_of(task: dict) -> Task:
    return Task.objects.select_related("agent").get(pk=task["metadata"]["a2aProxy"]["remoteTaskId"])


def test_it_relays_a_remote_echo_to_completion(server, rpc, demo_agent):
    proxy = demo_agent("proxy-to-echo", "a2a_proxy", {"url": server.agent_url("echo")})
    task = rpc("SendMessage", user_message("hi", new_id()), agent=proxy)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task) == "Request is completed!"
    assert artifact_text(task) == "Hello, World! I have received your request (hi)"
    # The remote task is a real task of the echo agent, and it completed too.
    remote = remote_task_of(task)
    assert remote.agent.slug == "echo"
    assert remote.state == "completed"
    assert str(remote.pk) != task["id"]


def test_a_follow_up_reaches_the_same_remote_task_through_input_required(server, rpc, demo_agent):
    proxy = demo_agent("proxy-to-clarify", "a2a_proxy", {"url": server.agent_url("clarify")})
    first = rpc("SendMessage", user_message("Book a venue", new_id()), agent=proxy)["result"]["task"]
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert status_text(first) == QUESTION

    answer = user_message("Forty guests in May", new_id(), taskId=first["id"])
    second = rpc("SendMessage", answer, agent=proxy)["result"]["task"]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "Book a venue" in artifact_text(second)
    assert "Forty guests in May" in artifact_text(second)
    # Both turns went to one remote task, which holds the whole exchange.
    remote = remote_task_of(second)
    assert second["metadata"] == first["metadata"]
    assert remote.agent.slug == "clarify"
    assert remote.state == "completed"
    assert remote.messages.filter(role="user").count() == 2


def test_canceling_a_task_waiting_for_input_cancels_the_remote_task_too(server, rpc, demo_agent):
    proxy = demo_agent("proxy-cancel-to-clarify", "a2a_proxy", {"url": server.agent_url("clarify")})
    task = rpc("SendMessage", user_message("Book a venue", new_id()), agent=proxy)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    remote_id = task["metadata"]["a2aProxy"]["remoteTaskId"]
    remote = rpc("GetTask", {"id": remote_id}, agent="clarify")["result"]
    assert remote["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    # No turn is running on either side: the local task is canceled at once...
    canceled = rpc("CancelTask", {"id": task["id"]}, agent=proxy)["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    # ...and the remote task does not wait for an answer forever.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        remote = rpc("GetTask", {"id": remote_id}, agent="clarify")["result"]
        if remote["status"]["state"] != "TASK_STATE_INPUT_REQUIRED":
            break
        time.sleep(0.2)
    assert remote["status"]["state"] == "TASK_STATE_CANCELED"
    assert (
        rpc("GetTask", {"id": task["id"]}, agent=proxy)["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    )


@pytest.fixture
def proxy_to_progress(server, demo_agent) -> str:
    remote = demo_agent("progress-behind-proxy", "progress", {"duration": 1.0})
    return demo_agent("proxy-to-progress", "a2a_proxy", {"url": server.agent_url(remote)})


async def test_sdk_streaming_client_gets_the_remote_artifact_chunks_relayed(server, proxy_to_progress):
    proxy = proxy_to_progress
    client = await create_client(server.agent_url(proxy), client_config=ClientConfig(streaming=True))
    try:
        request = SendMessageRequest(message=new_text_message("relay me", role=Role.ROLE_USER))
        events = [event async for event in client.send_message(request)]
    finally:
        await client.close()
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(chunks) >= 2
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert chunks[-1].last_chunk
    assert all(c.task_id == events[0].task.id for c in chunks)
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def test_an_unreachable_remote_fails_with_a_readable_reason(server, rpc, demo_agent):
    closed = f"http://127.0.0.1:{free_port()}/a2a/demo/echo/"
    proxy = demo_agent("proxy-to-nowhere", "a2a_proxy", {"url": closed})
    task = rpc("SendMessage", user_message("anyone there?", new_id()), agent=proxy)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    reason = status_text(task)
    assert reason.startswith("The remote agent could not be used:")
    assert "Traceback" not in reason
    assert "\n" not in reason


def test_a_header_httpx_refuses_is_never_quoted_to_callers(server, rpc, demo_agent, settings):
    # A pasted key with a trailing space: httpx refuses the header and quotes it in its error.
    # A config saved before the check below existed: the turn fails without the secret.
    config = {"url": server.agent_url("echo"), "headers": {"Authorization": "Bearer sk-SECRET "}}
    proxy = demo_agent("proxy-with-a-bad-header", "a2a_proxy", config)
    task = rpc("SendMessage", user_message("hi", new_id()), agent=proxy)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    reason = status_text(task)
    assert "not valid HTTP" in reason and "sk-SECRET" not in reason, reason
    # And such a config is refused when it is saved, naming the header, not its value.
    settings.PROXY_ALLOW_PRIVATE_NETWORKS = True  # this process's screen, for the loopback URL
    from agents.builtin.a2a_proxy import A2AProxyAgentExecutor
    from agents.registry import ConfigInvalid

    for headers in ({"Authorization": "Bearer sk-SECRET "}, {"Authorization": "Bearer sk-SECRET\n"}):
        with pytest.raises(ConfigInvalid) as refused:
            A2AProxyAgentExecutor.validate_config({"url": server.agent_url("echo"), "headers": headers})
        assert "'Authorization'" in str(refused.value) and "sk-SECRET" not in str(refused.value)


def test_the_seeded_proxy_fronts_the_local_echo_agent_out_of_the_box(server, rpc):
    from a2a_platform.seed import seed_demo
    from agents.models import Agent

    # `manage.py serve` seeds with its own address; the test server's is another port.
    seed_demo(local_base_url=server.base_url)
    seeded = Agent.objects.get(tenant__slug="demo", slug="a2a-proxy")
    assert seeded.config == {"url": server.agent_url("echo")}
    task = rpc("SendMessage", user_message("hello", new_id()), agent="a2a-proxy")["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task)
    assert artifact_text(task) == "Hello, World! I have received your request (hello)"
    assert remote_task_of(task).agent.slug == "echo"


def test_the_seed_leaves_a_proxy_an_admin_pointed_elsewhere_alone(server):
    from a2a_platform.seed import seed_demo
    from agents.models import Agent

    elsewhere = {"url": server.agent_url("clarify"), "timeout": 30}
    Agent.objects.filter(tenant__slug="demo", slug="a2a-proxy").update(config=elsewhere)
    try:
        seed_demo(local_base_url="http://127.0.0.1:9999")
        assert Agent.objects.get(tenant__slug="demo", slug="a2a-proxy").config == elsewhere
    finally:
        Agent.objects.filter(tenant__slug="demo", slug="a2a-proxy").update(
            config={"url": server.agent_url("echo")}
        )


def test_a_proxy_with_a_card_url_reads_the_card_there(server, rpc, demo_agent):
    config = {
        "url": server.agent_url("echo"),
        "card_url": server.agent_url("echo") + ".well-known/agent.json",
    }
    proxy = demo_agent("proxy-with-card-url", "a2a_proxy", config)
    task = rpc("SendMessage", user_message("via card", new_id()), agent=proxy)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task)
    assert artifact_text(task) == "Hello, World! I have received your request (via card)"


def test_a_remote_url_on_the_platforms_own_network_is_refused(settings):
    from agents.builtin.a2a_proxy import ProxyConfigError, remote_target

    settings.PROXY_ALLOW_PRIVATE_NETWORKS = False
    settings.DEBUG = False
    for url in ("http://127.0.0.1:8000/a2a/demo/echo/", "http://169.254.169.254/latest/", "http://10.0.0.8/"):
        with pytest.raises(ProxyConfigError, match="refused"):
            remote_target({"url": url})
    with pytest.raises(ProxyConfigError) as refused:
        remote_target({"url": "http://127.0.0.1:8000/a2a/demo/echo/"})
    assert str(refused.value).endswith(
        "a loopback address; proxied calls are only sent to public addresses "
        "unless PROXY_ALLOW_PRIVATE_NETWORKS=true is set"
    )
    # Debug mode allows loopback (the seeded demo), not the rest of the private ranges.
    settings.DEBUG = True
    assert remote_target({"url": "http://127.0.0.1:8000/a2a/demo/echo/"}).url.startswith("http://127.0.0.1")
    with pytest.raises(ProxyConfigError, match="a private address"):
        remote_target({"url": "http://10.0.0.8/"})
    settings.DEBUG = False
    settings.PROXY_ALLOW_PRIVATE_NETWORKS = True
    assert remote_target({"url": "http://127.0.0.1:8000/a2a/demo/echo/"}).url.startswith("http://127.0.0.1")
