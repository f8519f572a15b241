"""Remote cards and the proxy agent give up on a host name DNS never answers, in their own time.

Importing an agent, the proxy's health check and each proxied turn resolve
the remote's host names. Without a deadline, a DNS server that stayed silent
held the web request, the health check's page or the engine's event loop for
as long as it stayed silent. The lookups here go to a silent DNS server on
loopback (tests/dns_server.py).
"""

import asyncio
import json
import socket
import threading
import time
import uuid

import pytest
from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState, TaskStatus
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from agents import outbound
from agents.builtin.a2a_proxy import A2AProxyAgentExecutor, ProxyConfigError, remote_target
from agents.health import _check as agent_health_check
from agents.health import _key as health_key
from agents.health import agent_health, agents_health
from agents.models import Agent
from agents.registry import ConfigInvalid
from agents.remote_cards import CardUnavailable, card_fetch, card_parse
from agents.services import agent_import_preview, agent_register
from tasks_app.models import Context
from tasks_app.models import Task as TaskRow
from tasks_app.turns import agent_cancel
from tenants.models import Tenant
from tests import dns_server
from tests.dns_server import finishes_within

silent_dns = dns_server.silent_dns
full_tenant = dns_server.full_tenant

CARD = {
    "name": "Far Away",
    "description": "Behind a silent DNS server",
    "version": "1.0.0",
    "capabilities": {},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [],
}


def test_a_card_url_dns_never_answers_is_refused_within_the_fetch_timeout(silent_dns):
    started = time.monotonic()
    with pytest.raises(CardUnavailable) as refused:
        finishes_within(10, card_fetch, "https://agent.silent.test/.well-known/agent-card.json", timeout=1)
    assert time.monotonic() - started < 3
    assert str(refused.value) == (
        "The card URL is refused: the host 'agent.silent.test' did not resolve within 1 s."
    )
    assert silent_dns.wait_for_queries(1) == ["agent.silent.test"]


def test_importing_from_a_host_dns_never_answers_is_an_error_on_card_url(silent_dns):
    # What the import API and the console's form answer with (a 400 on card_url), not a 500 or a hang.
    with pytest.raises(ValidationError) as invalid:
        url = "https://agent.silent.test/.well-known/agent-card.json"
        finishes_within(15, agent_import_preview, url, tenant=Tenant(pk=1))
    assert invalid.value.message_dict == {
        "card_url": ["The card URL is refused: the host 'agent.silent.test' did not resolve within 5 s."]
    }


def test_a_card_whose_interfaces_dns_never_answers_is_refused_in_time(silent_dns):
    interfaces = [
        {
            "url": f"https://rpc{number}.silent.test/a2a",
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }
        for number in range(3)
    ]
    body = json.dumps({**CARD, "supportedInterfaces": interfaces}).encode()
    started = time.monotonic()
    with pytest.raises(CardUnavailable) as refused:
        finishes_within(10, card_parse, body, "https://8.8.8.8/card", timeout=1)
    assert time.monotonic() - started < 3
    assert str(refused.value) == (
        "The card's interface https://rpc0.silent.test/a2a is refused: "
        "the host 'rpc0.silent.test' did not resolve within 1 s."
    )


def test_a_cards_interfaces_share_one_deadline(monkeypatch):
    # Each name answers in 0.45 s, in time for a lookup of its own; three of them do not fit in 1 s.
    def slow_lookup(host, port, *args, **kwargs):
        time.sleep(0.45)
        return socket.getaddrinfo("8.8.8.8", port, *args, **kwargs)

    monkeypatch.setattr(outbound, "getaddrinfo", slow_lookup)
    interfaces = [
        {"url": f"https://rpc{number}.late.test/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        for number in range(3)
    ]
    body = json.dumps({**CARD, "supportedInterfaces": interfaces}).encode()
    started = time.monotonic()
    with pytest.raises(
        CardUnavailable, match=r"^The card's interface https://rpc2\.late\.test/a2a is refused"
    ):
        finishes_within(10, card_parse, body, "https://8.8.8.8/card", timeout=1)
    assert time.monotonic() - started < 1.3
    assert card_parse(body, "https://8.8.8.8/card", timeout=2).card.name == "Far Away"


def test_the_console_health_of_a_proxy_whose_name_dns_never_answers_takes_its_2_s(silent_dns):
    # The check validates the config (its URLs looked up), then fetches the card: 2 s in all.
    agent = Agent(handler="a2a_proxy", config={"url": "https://agent.silent.test/a2a/"})
    started = time.monotonic()
    health = finishes_within(15, agent_health_check, agent)
    assert time.monotonic() - started < 3
    assert not health.ok
    assert "did not resolve within 2 s" in health.reason, health.reason


def test_a_proxy_health_check_counts_its_lookups_as_its_tenants(full_tenant):
    config = {"url": "https://agent.silent.test/a2a/"}
    mine = Agent(tenant_id=full_tenant, handler="a2a_proxy", config=config)
    health = finishes_within(15, agent_health_check, mine)
    assert "too many lookups are waiting on DNS" in health.reason, health.reason
    # Another tenant's agent still gets its lookup (and its 2 s).
    other = Agent(tenant_id=full_tenant + 1, handler="a2a_proxy", config=config)
    health = finishes_within(15, agent_health_check, other)
    assert "did not resolve within 2 s" in health.reason, health.reason


@pytest.mark.django_db
def test_an_import_and_a_proxy_agents_save_count_their_lookups_as_their_tenants(full_tenant):
    # The tenant has all it may have waiting: both are refused at once, not after their timeouts.
    tenant = Tenant(pk=full_tenant, slug="full")
    started = time.monotonic()
    with pytest.raises(ValidationError) as refused_import:
        finishes_within(15, agent_import_preview, "https://card.silent.test/card.json", tenant=tenant)
    with pytest.raises(ValidationError) as refused_save:
        config = {"url": "https://agent.silent.test/a2a/"}
        finishes_within(
            15, agent_register, tenant=tenant, actor="t", slug="far", handler="a2a_proxy", config=config
        )
    assert time.monotonic() - started < 2
    assert "too many lookups are waiting on DNS" in refused_import.value.message_dict["card_url"][0]
    assert "too many lookups are waiting on DNS" in refused_save.value.message_dict["config"][0]
    assert not Agent.objects.filter(slug="far").exists()


def test_a_proxy_agents_cancel_counts_its_lookups_as_its_tenants(stored, full_tenant, silent_dns, caplog):
    # The cancel job of a task canceled while it waited: the proxy's cancel() of the remote task
    # looks up the remote's name, as its tenant's. That tenant's share is full: refused at once.
    tenant, made = Tenant.objects.get_or_create(
        pk=full_tenant, defaults={"slug": f"full-{uuid.uuid4().hex[:8]}"}
    )
    agent = Agent.objects.create(
        tenant=tenant,
        slug=f"proxy-{uuid.uuid4().hex[:8]}",
        handler="a2a_proxy",
        config={"url": "https://canceled.silent.test/a2a/"},
    )
    owner = f"client:cancel-lookups-{uuid.uuid4()}"
    try:
        context = Context.objects.create(tenant=tenant, owner=owner, context_id=f"c-{uuid.uuid4()}")
        task = TaskRow.objects.create(
            tenant=tenant,
            agent=agent,
            context=context,
            owner=owner,
            state="canceled",
            status_timestamp=timezone.now(),
            metadata={"a2aProxy": {"remoteTaskId": "remote-1", "remoteContextId": "remote-c"}},
        )
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="agents.builtin.a2a_proxy"):
            finishes_within(15, agent_cancel, task_id=str(task.pk))
        assert time.monotonic() - started < 2
        assert "too many lookups are waiting on DNS" in caplog.text
        assert "canceled.silent.test" not in silent_dns.queries
    finally:
        Context.objects.filter(tenant=tenant, owner=owner).delete()  # its task with it
        agent.delete()
        if made:
            tenant.delete()


def test_a_health_check_refused_for_a_full_lookup_share_is_not_kept(full_tenant, monkeypatch):
    # How busy the platform was is no verdict on the agent: the next look checks again.
    config = {"url": "https://agent.silent.test/a2a/"}
    single = Agent(pk=-1, tenant_id=full_tenant, handler="a2a_proxy", config=config)
    listed = Agent(pk=-2, tenant_id=full_tenant, handler="a2a_proxy", config=config)
    keys = [health_key(single), health_key(listed)]
    cache.delete_many(keys)
    try:
        assert finishes_within(15, agent_health, single).reason == (
            "It could not be checked now: too many lookups are waiting on DNS (agent.silent.test was not "
            "looked up). It is checked again at the next look."
        )
        assert "too many lookups" in finishes_within(15, agents_health, [listed])[listed.pk].reason
        assert cache.get_many(keys) == {}
        monkeypatch.setattr(outbound, "MAX_LOOKUPS_PER_TENANT", outbound.MAX_LOOKUPS)  # room again
        checked = finishes_within(15, agent_health, single)
        assert "did not resolve within 2 s" in checked.reason
        listed_checked = finishes_within(15, agents_health, [listed])[listed.pk]
        assert "did not resolve within 2 s" in listed_checked.reason
        # A verdict on the agent is kept as before: the next look is that very check.
        assert agent_health(single) == checked
        assert agents_health([listed])[listed.pk] == listed_checked
    finally:
        cache.delete_many(keys)


def test_the_proxy_health_check_gives_up_on_a_silent_name_in_its_own_time(silent_dns):
    config = {"url": "https://agent.silent.test/a2a/"}
    started = time.monotonic()
    with pytest.raises(ConfigInvalid) as unready:
        finishes_within(10, A2AProxyAgentExecutor.check_ready, config)
    assert time.monotonic() - started < 4
    assert str(unready.value) == (
        "\"url\" in its config is refused: the host 'agent.silent.test' did not resolve within 2 s."
    )
    with pytest.raises(ProxyConfigError, match="did not resolve within 0.5 s"):
        finishes_within(10, remote_target, {"url": "https://x.silent.test/", "timeout": 60}, timeout=0.5)


def test_a_proxy_configs_two_urls_share_one_deadline(silent_dns, monkeypatch):
    # The url answers late but in time; the card_url's DNS never answers. Together: the timeout.
    silent = outbound.getaddrinfo

    def lookup(host, port, *args, **kwargs):
        if host == "agent.late.test":
            time.sleep(0.5)
            return socket.getaddrinfo("8.8.8.8", port, *args, **kwargs)
        return silent(host, port, *args, **kwargs)

    monkeypatch.setattr(outbound, "getaddrinfo", lookup)
    config = {"url": "https://agent.late.test/a2a/", "card_url": "https://card.silent.test/card.json"}
    started = time.monotonic()
    with pytest.raises(
        ProxyConfigError, match="^\"card_url\" in its config is refused: the host 'card.silent.test'"
    ):
        finishes_within(10, remote_target, config, timeout=0.8)
    assert time.monotonic() - started < 1.15  # not 0.5 + 0.8


def test_a_proxied_turn_waits_for_dns_off_the_event_loop(silent_dns):
    """While the remote's name is looked up, the engine's loop goes on with other turns."""
    executor = A2AProxyAgentExecutor({"url": "https://agent.silent.test/a2a/"})
    task = Task(
        id=str(uuid.uuid4()),
        context_id=str(uuid.uuid4()),
        status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
    )
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text="hi")])
    context = RequestContext(
        ServerCallContext(),
        request=SendMessageRequest(message=message),
        task_id=task.id,
        context_id=task.context_id,
        task=task,
    )

    async def turn() -> tuple[int, str]:
        queue = EventQueue()
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await executor.execute(context, queue)
        ticker.cancel()
        event = await asyncio.wait_for(queue.dequeue_event(), 1)
        return ticks, event.status.message.parts[0].text

    # The silent server lets the lookup go after a second: it fails, and the turn with it.
    def release_later():
        silent_dns.wait_for_queries(1)
        time.sleep(1)
        silent_dns.release()

    threading.Thread(target=release_later, daemon=True).start()
    with override_settings(DEBUG=False, PROXY_ALLOW_PRIVATE_NETWORKS=False):
        ticks, text = finishes_within(15, asyncio.run, turn())
    assert ticks >= 10, "the event loop stood still during the lookup"
    assert text == (
        'This proxy agent is not set up correctly: "url" in its config is refused: '
        "the host 'agent.silent.test' does not resolve."
    )


def test_a_card_sent_a_byte_at_a_time_is_refused_within_the_fetch_timeout():
    # httpx's timeout bounds each read, not the GET: a server that sends its card a
    # byte at a time, each in time for the next read, held the import for as long
    # as the card was long (here 30 s; MAX_CARD_BYTES bytes at most).
    body = json.dumps(CARD).encode()[:150]
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            conn.sendall(b"Content-Length: %d\r\n\r\n" % len(body))
            for byte in body:
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    server = threading.Thread(target=drip, daemon=True)
    server.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/.well-known/agent-card.json"
    started = time.monotonic()
    try:
        with override_settings(PROXY_ALLOW_PRIVATE_NETWORKS=True):
            with pytest.raises(CardUnavailable) as refused:
                finishes_within(10, card_fetch, url, timeout=1)
    finally:
        stop.set()
        listener.close()
        server.join(5)
    assert time.monotonic() - started < 2.5
    assert str(refused.value) == f"{url} did not send its card within 1 s."
