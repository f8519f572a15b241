"""Push-notification config CRUD over JSON-RPC, and the webhook URL screening."""

import uuid

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from django.test import override_settings

from agents.models import Agent
from agents.outbound import UrlRefused, url_check
from tasks_app.models import PushConfig, Task
from tasks_app.push import push_config_clean
from tenants.models import Tenant
from tests.conftest import user_message

HOOK = "http://127.0.0.1:9/hook"


def new_task(rpc) -> str:
    return rpc("SendMessage", user_message("hi", f"push-crud-{uuid.uuid4()}"))["result"]["task"]["id"]


def create(rpc, task_id: str, **fields) -> dict:
    return rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": HOOK, **fields})


def test_configs_without_id_get_their_own_server_ids(rpc, stored):
    task_id = new_task(rpc)
    first = create(rpc, task_id)["result"]
    second = create(rpc, task_id, url=HOOK + "2")["result"]
    assert first["id"] and second["id"] and first["id"] != second["id"]
    assert first["id"] != task_id
    listed = rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]["configs"]
    assert [(c["id"], c["url"]) for c in listed] == [(first["id"], HOOK), (second["id"], HOOK + "2")]


def test_create_with_id_then_get_answers_the_config_without_secrets(rpc, stored):
    task_id = new_task(rpc)
    sent = {
        "id": "mine",
        "token": "tok-123",
        "authentication": {"scheme": "Bearer", "credentials": "s3cret"},
    }
    created = create(rpc, task_id, **sent)["result"]
    expected = {"id": "mine", "taskId": task_id, "url": HOOK, "authentication": {"scheme": "Bearer"}}
    assert created == expected
    got = rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "mine"})["result"]
    assert got == expected
    listed = rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]
    assert listed["configs"] == [expected]
    assert "s3cret" not in str(listed) and "tok-123" not in str(listed)
    # The secrets are stored for delivery all the same.
    stored_config = PushConfig.objects.get(task_id=task_id, config_id="mine")
    assert (stored_config.token, stored_config.auth_credentials) == ("tok-123", "s3cret")


def test_create_with_an_existing_id_replaces_that_config(rpc, stored):
    task_id = new_task(rpc)
    create(rpc, task_id, id="rotating", token="old")
    create(rpc, task_id, id="rotating", token="new", url=HOOK + "-v2")
    assert PushConfig.objects.filter(task_id=task_id).count() == 1
    assert PushConfig.objects.get(task_id=task_id).token == "new"
    got = rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "rotating"})["result"]
    assert got["url"] == HOOK + "-v2"


def test_delete_is_idempotent(rpc, stored):
    task_id = new_task(rpc)
    create(rpc, task_id, id="gone")
    assert rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "gone"})["result"] == {}
    assert rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "gone"})["result"] == {}
    missing = rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "gone"})
    assert missing["error"]["code"] == -32001
    assert rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]["configs"] == []


def test_list_pages_with_a_cursor(rpc, stored):
    task_id = new_task(rpc)
    ids = [create(rpc, task_id, id=f"c{n}")["result"]["id"] for n in range(3)]
    first = rpc("ListTaskPushNotificationConfigs", {"taskId": task_id, "pageSize": 2})["result"]
    assert [c["id"] for c in first["configs"]] == ids[:2]
    second = rpc(
        "ListTaskPushNotificationConfigs",
        {"taskId": task_id, "pageSize": 2, "pageToken": first["nextPageToken"]},
    )["result"]
    assert [c["id"] for c in second["configs"]] == ids[2:]
    assert "nextPageToken" not in second
    bad = rpc("ListTaskPushNotificationConfigs", {"taskId": task_id, "pageToken": "nonsense"})
    assert bad["error"]["code"] == -32602


@pytest.mark.parametrize(
    "method",
    [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ],
)
def test_a_missing_task_is_not_found(rpc, method):
    params = {"taskId": str(uuid.uuid4()), "id": "x", "url": HOOK}
    assert rpc(method, params)["error"]["code"] == -32001


def test_another_tenants_caller_cannot_see_or_touch_the_configs(rpc, stored):
    globex, _ = Tenant.objects.get_or_create(slug="globex", defaults={"name": "Globex"})
    Agent.objects.get_or_create(
        tenant=globex,
        slug="echo",
        defaults={"name": "echo", "handler": "echo", "visibility": Agent.Visibility.PUBLIC},
    )
    task_id = new_task(rpc)
    create(rpc, task_id, id="private")
    for method in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
        answer = rpc(method, {"taskId": task_id, "id": "private"}, tenant="globex")
        assert answer["error"]["code"] == -32001
    listed = rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}, tenant="globex")
    assert listed["error"]["code"] == -32001
    created = rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": HOOK}, tenant="globex")
    assert created["error"]["code"] == -32001
    assert list(PushConfig.objects.filter(task_id=task_id).values_list("config_id", flat=True)) == ["private"]


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"url": "ftp://127.0.0.1/hook"}, id="ftp-scheme"),
        pytest.param({"url": "file:///etc/passwd"}, id="file-scheme"),
        pytest.param({"url": "http://user:pw@127.0.0.1/hook"}, id="credentials-in-url"),
        pytest.param({"url": "http://169.254.169.254/latest/meta-data"}, id="metadata"),
        pytest.param({"url": ""}, id="no-url"),
        pytest.param({"token": "a\r\nX-Injected: 1"}, id="header-injection-in-token"),
        # httpx refuses each of these at every delivery, quoting the value in its error.
        pytest.param({"token": "tok-secret\n"}, id="line-feed-ending-token"),
        pytest.param({"token": "tok-secret "}, id="space-ending-token"),
        pytest.param(
            {"authentication": {"scheme": "Bearer", "credentials": "c "}}, id="space-ending-credentials"
        ),
        pytest.param(
            {"authentication": {"scheme": "Bearer\n", "credentials": "c"}}, id="line-feed-ending-scheme"
        ),
        pytest.param({"authentication": {"scheme": "Bearer x", "credentials": "c"}}, id="bad-scheme"),
        pytest.param({"id": "a/b"}, id="slash-in-id"),
        # No TCP port: the webhook could never be called (it was stored all the same).
        pytest.param({"url": "http://127.0.0.1:99999/hook"}, id="port-too-large"),
        pytest.param({"url": "https://127.0.0.1:0/hook"}, id="port-zero"),
        pytest.param({"url": "https://example.com:-1/hook"}, id="port-negative"),
    ],
)
def test_bad_configs_are_refused_and_nothing_is_stored(rpc, stored, fields):
    task_id = new_task(rpc)
    answer = create(rpc, task_id, **fields)
    assert answer["error"]["code"] == -32602, answer
    assert not PushConfig.objects.filter(task_id=task_id).exists()


def test_a_task_holds_a_bounded_number_of_configs(rpc, stored):
    task_id = new_task(rpc)
    for _ in range(10):
        assert "result" in create(rpc, task_id)
    eleventh = create(rpc, task_id)
    assert eleventh["error"]["code"] == -32602
    assert "at most 10" in eleventh["error"]["message"]


def test_deleting_the_task_deletes_its_configs(rpc, stored):
    task_id = new_task(rpc)
    create(rpc, task_id, id="doomed")
    Task.objects.filter(pk=task_id).delete()
    assert not PushConfig.objects.filter(config_id="doomed", task_id=task_id).exists()


# --- URL screening, in this process: the test server allows private networks. ---------
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[2002:7f00:1::]/hook",  # 6to4 of 127.0.0.1
        "http://[2002:a9fe:a9fe::]/hook",  # 6to4 of the metadata address
        "http://10.1.2.3/hook",
        "https://192.168.0.10/hook",
        "http://172.16.5.5/hook",
        "http://169.254.10.10/hook",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "http://224.0.0.1/hook",
        "http://240.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
    ],
)
def test_private_and_special_addresses_are_refused_by_default(url):
    with pytest.raises(UrlRefused, match="only sent to public addresses"):
        url_check(url, allow_private=False)


def test_private_networks_setting_allows_loopback_but_never_metadata():
    target = url_check("http://127.0.0.1:8080/hook", allow_private=True)
    assert target.address == "127.0.0.1"
    assert str(target.pinned_url) == "http://127.0.0.1:8080/hook"
    with pytest.raises(UrlRefused, match="metadata"):
        url_check("http://169.254.169.254/", allow_private=True)


def test_a_public_address_is_accepted_and_pinned():
    target = url_check("https://1.1.1.1:8443/hooks?x=1", allow_private=False)
    assert target.address == "1.1.1.1"
    assert str(target.pinned_url) == "https://1.1.1.1:8443/hooks?x=1"


@pytest.mark.parametrize("url", ["http://xn--a.com/hook", "http://xn--/hook", "https://xn--zz-.example/"])
def test_a_host_that_is_no_valid_punycode_is_refused_not_a_500(url, rpc):
    with pytest.raises(UrlRefused, match="is not a valid URL"):
        url_check(url, allow_private=False)
    answer = create(rpc, new_task(rpc), id="punycode", url=url)
    assert answer["error"]["code"] == -32602, answer


@pytest.mark.parametrize("url", ["gopher://example.com/", "ftp://1.1.1.1/", "javascript:alert(1)"])
def test_schemes_other_than_http_are_refused(url):
    with pytest.raises(UrlRefused, match="scheme"):
        url_check(url, allow_private=True)


def test_a_loopback_webhook_is_an_invalid_params_error_when_private_networks_are_off():
    config = pb.TaskPushNotificationConfig(task_id="t", url="http://127.0.0.1:9/hook")
    with override_settings(PUSH_ALLOW_PRIVATE_NETWORKS=False):
        with pytest.raises(InvalidParamsError, match="127.0.0.1, a loopback address"):
            push_config_clean(config)
    with override_settings(PUSH_ALLOW_PRIVATE_NETWORKS=True):
        assert push_config_clean(config).url == "http://127.0.0.1:9/hook"


def test_a_host_that_does_not_resolve_yet_is_accepted_and_literal_addresses_still_screened():
    with override_settings(PUSH_ALLOW_PRIVATE_NETWORKS=False):
        # No lookup at creation: the name is resolved (and screened) at each delivery.
        later = pb.TaskPushNotificationConfig(task_id="t", url="https://hooks.not-yet.invalid/a2a")
        assert push_config_clean(later).url == "https://hooks.not-yet.invalid/a2a"
        for literal in ("http://10.0.0.1/hook", "http://[::1]/hook", "http://169.254.169.254/"):
            with pytest.raises(InvalidParamsError, match="only sent to public addresses"):
                push_config_clean(pb.TaskPushNotificationConfig(task_id="t", url=literal))
    with override_settings(PUSH_ALLOW_PRIVATE_NETWORKS=True):
        with pytest.raises(InvalidParamsError, match="metadata"):
            push_config_clean(pb.TaskPushNotificationConfig(task_id="t", url="http://169.254.169.254/"))


@pytest.mark.parametrize(
    "url",
    ["http://127.1/hook", "http://0x7f000001/hook", "http://2130706433/hook", "http://017700000001/hook"],
)
def test_a_literal_address_in_another_ipv4_spelling_is_screened_too(url):
    # getaddrinfo reads each of these as 127.0.0.1 without asking DNS; they were
    # accepted as names, stored, and then refused at every delivery.
    with override_settings(PUSH_ALLOW_PRIVATE_NETWORKS=False):
        with pytest.raises(InvalidParamsError, match="127.0.0.1, a loopback address"):
            push_config_clean(pb.TaskPushNotificationConfig(task_id="t", url=url))


# Names that only look like the ones refused at creation: names, resolved (and screened) when called.
LOOKALIKE_NAMES = (
    "http://localhost.example.com/hook",
    "http://notlocalhost/hook",
    "http://localhost-1.test/",
    "http://local.example.com/hook",
    "http://internal-tools.example/",
    "http://arpa.test/",
)


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        # Loopback by definition (RFC 6761), refused as 127.0.0.1 is.
        ("http://localhost/hook", "a loopback address"),
        ("http://LocalHost.:8080/hook", "a loopback address"),
        ("https://hooks.localhost/a2a", "a loopback address"),
        ("http://a.b.localhost/", "a loopback address"),
        # Private-use names, which no public DNS answers.
        ("http://printer.local/hook", "a private-use name"),
        ("https://hooks.internal/a2a", "a private-use name"),
        ("http://nas.home.arpa:8080/", "a private-use name"),
        ("http://INTERNAL./", "a private-use name"),
    ],
)
def test_names_that_can_only_be_private_are_refused_at_creation_naming_the_setting(url, refusal):
    # Accepted as names and stored, they were refused at every delivery.
    with override_settings(PUSH_ALLOW_PRIVATE_NETWORKS=False):
        with pytest.raises(InvalidParamsError, match=refusal) as refused:
            push_config_clean(pb.TaskPushNotificationConfig(task_id="t", url=url))
        assert "unless PUSH_ALLOW_PRIVATE_NETWORKS=true is set" in str(refused.value)
        for name in LOOKALIKE_NAMES:
            assert push_config_clean(pb.TaskPushNotificationConfig(task_id="t", url=name)).url == name
    with override_settings(PUSH_ALLOW_PRIVATE_NETWORKS=True):
        assert push_config_clean(pb.TaskPushNotificationConfig(task_id="t", url=url)).url == url
