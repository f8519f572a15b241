import httpx


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
