import time

import httpx
import pytest


def test_tenant_catalog_lists_the_cards_of_enabled_agents(server):
    catalog = httpx.get(f"{server.base_url}/a2a/demo/").json()
    names = {card["supportedInterfaces"][0]["url"] for card in catalog["agents"]}
    assert server.agent_url("echo") in names
    assert httpx.get(f"{server.base_url}/a2a/no-such-tenant/").status_code == 404


def test_metrics_count_tasks_by_state_for_loopback_callers(server, rpc):
    rpc(
        "SendMessage",
        {"message": {"role": "ROLE_USER", "messageId": "metrics-msg", "parts": [{"text": "m"}]}},
    )
    response = httpx.get(f"{server.base_url}/metrics")
    assert response.status_code == 200
    assert 'a2a_tasks{state="completed"}' in response.text
    assert 'a2a_turns{turn="done"}' in response.text


def test_readyz_reports_database_and_broker(server):
    assert httpx.get(f"{server.base_url}/readyz").json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_the_django_admin_gets_its_stylesheets(server):
    login = httpx.get(f"{server.base_url}/admin/login/")
    assert login.status_code == 200
    css = httpx.get(f"{server.base_url}/static/admin/css/base.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")


CARD_PATHS = [".well-known/agent-card.json", ".well-known/agent.json"]


@pytest.mark.parametrize("path", CARD_PATHS)
def test_agent_card_revalidation_follows_rfc_9110(server, path):
    url = server.agent_url("echo") + path
    first = httpx.get(url)
    assert first.status_code == 200
    etag, last_modified = first.headers["ETag"], first.headers["Last-Modified"]
    assert etag.startswith('W/"')
    strong_form = etag[2:]

    def revalidate(**headers) -> httpx.Response:
        return httpx.get(url, headers={k.replace("_", "-"): v for k, v in headers.items()})

    # If-None-Match compares weakly: the tag with or without W/, in a list, or *.
    for tag in (etag, strong_form, f'"nope", {etag}', f'W/"nope",{strong_form}', "*"):
        answer = revalidate(If_None_Match=tag)
        assert answer.status_code == 304, (tag, answer.status_code)
        assert answer.content == b""
        assert answer.headers["ETag"] == etag
        assert answer.headers["Last-Modified"] == last_modified
        assert answer.headers["Cache-Control"] == first.headers["Cache-Control"]
    assert revalidate(If_None_Match='"nope"').status_code == 200
    assert revalidate(If_None_Match='W/"nope", "other"').status_code == 200
    # If-Modified-Since: not changed since then is 304; changed since is 200.
    assert revalidate(If_Modified_Since=last_modified).status_code == 304
    assert revalidate(If_Modified_Since="Sat, 01 Jan 2000 00:00:00 GMT").status_code == 200
    # With both, If-None-Match decides (RFC 9110 §13.2.2).
    assert revalidate(If_None_Match='"nope"', If_Modified_Since=last_modified).status_code == 200
    assert revalidate(If_Modified_Since="not a date").status_code == 200
    head = httpx.head(url, headers={"If-None-Match": strong_form})
    assert head.status_code == 304 and head.headers["ETag"] == etag


def test_a_changed_card_is_sent_again_to_if_modified_since(server, stored):
    from agents.models import Agent
    from tenants.models import Tenant

    agent, _ = Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="card-changes",
        defaults={"name": "Card changes", "handler": "echo", "enabled": True, "description": "before"},
    )
    url = server.agent_url("card-changes") + ".well-known/agent-card.json"
    before = httpx.get(url)
    seen = before.headers["Last-Modified"]
    assert httpx.get(url, headers={"If-Modified-Since": seen}).status_code == 304
    time.sleep(1.1)  # HTTP dates count whole seconds
    agent.description = "after"
    agent.save()
    after = httpx.get(url, headers={"If-Modified-Since": seen, "If-None-Match": 'W/"stale"'})
    assert after.status_code == 200 and after.json()["description"] == "after"
    changed = httpx.get(url, headers={"If-Modified-Since": seen})
    assert changed.status_code == 200 and changed.headers["Last-Modified"] != seen
    assert httpx.get(url, headers={"If-None-Match": before.headers["ETag"]}).status_code == 200


@pytest.mark.parametrize("path", CARD_PATHS + [""])
@pytest.mark.parametrize("verb", ["POST", "PUT", "PATCH", "DELETE"])
def test_card_urls_answer_only_get_and_head(server, path, verb):
    url = server.agent_url("echo") + path if path else f"{server.base_url}/a2a/demo/"
    # Not a CSRF 403 (nothing here takes a write): a 405 that says what is allowed.
    answer = httpx.request(verb, url, content=b"{}", headers={"Content-Type": "application/json"})
    assert answer.status_code == 405, answer.text[:200]
    assert answer.headers["Allow"] == "GET, HEAD"
    assert answer.headers["content-type"].startswith("application/json")
    assert httpx.head(url).status_code == 200
