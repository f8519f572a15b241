"""The gRPC binding through the official a2a-sdk client (GrpcTransport), and its status errors.

The session's platform serves gRPC next to HTTP: a second port of `manage.py
serve` on the embedded default, a `manage.py grpcserve` process in services mode.
The client finds the GRPC interface (host:port and the tenant '<tenant>/<agent>')
on the agent's card, as any A2A client does.
"""

import asyncio
import uuid

import grpc
import httpx
import pytest
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.client.auth import AuthInterceptor, CredentialService
from a2a.client.errors import A2AClientError
from a2a.helpers import new_text_message
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc
from a2a.utils.errors import TaskNotFoundError
from a2a.utils.grpc_status import status_from_call
from google.rpc import error_details_pb2

from tests.api import tenancy
from tests.tasks_app.legacy_helpers import stored_counts, unique

trio = tenancy.trio
STATE = pb.TaskState


@pytest.fixture
def tokens(trio) -> dict[str, str]:
    """Tokens made through the ORM here, outside the tests' event loop."""
    return {
        "acme": trio.token("acme"),
        "globex": trio.token("globex"),
        "acme-invoke-only": trio.token("acme", ["a2a:invoke"]),
    }


class Token(CredentialService):
    """One bearer token for every call (the SDK's AuthInterceptor sends it as `authorization`)."""

    def __init__(self, token: str):
        self.token = token

    async def get_credentials(self, security_scheme_name, context):
        return self.token


async def grpc_client(url: str, *, streaming: bool = True, polling: bool = False, token: str | None = None):
    config = ClientConfig(
        streaming=streaming,
        polling=polling,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    interceptors = [AuthInterceptor(Token(token))] if token else None
    return await create_client(url, client_config=config, interceptors=interceptors)


def user_text(text: str, **fields) -> pb.SendMessageRequest:
    message = new_text_message(text, role=pb.Role.ROLE_USER)
    for name, value in fields.items():
        setattr(message, name, value)
    return pb.SendMessageRequest(message=message)


async def raw_call(server, method: str, request, metadata=None):
    """One rpc on the generated stub, with the metadata a 1.0 client sends unless told otherwise."""
    sent = [("a2a-version", "1.0")] if metadata is None else metadata
    async with grpc.aio.insecure_channel(server.grpc_target) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        call = getattr(stub, method)(request, metadata=sent)
        if method in ("SendStreamingMessage", "SubscribeToTask"):
            return [event async for event in call]
        return await call


async def rpc_error(server, method: str, request, metadata=None) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw_call(server, method, request, metadata)
    return caught.value


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo | None:
    status = status_from_call(error)
    assert status is not None and status.code == error.code().value[0]
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None


def final_state(events: list[pb.StreamResponse]) -> int:
    last = events[-1]
    return last.task.status.state if last.HasField("task") else last.status_update.status.state


def test_the_card_lists_the_grpc_interface_with_the_agents_tenant(server):
    card = httpx.get(server.agent_url("echo") + ".well-known/agent-card.json").json()
    grpc_interfaces = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    expected = {"url": server.grpc_target, "protocolBinding": "GRPC", "protocolVersion": "1.0"}
    assert grpc_interfaces == [{**expected, "tenant": "demo/echo"}]
    # JSON-RPC stays the preferred (first) interface.
    assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"


async def test_canceling_a_finished_task_is_not_cancelable(server):
    answer = await raw_call(server, "SendMessage", _addressed(user_text("done soon"), "demo/echo"))
    request = pb.CancelTaskRequest(id=answer.task.id, tenant="demo/echo")
    error = await rpc_error(server, "CancelTask", request)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(error).reason == "TASK_NOT_CANCELABLE"


def _addressed(request: pb.SendMessageRequest, tenant: str) -> pb.SendMessageRequest:
    request.tenant = tenant
    return request


async def test_the_extended_card_of_a_public_agent_is_unsupported(server):
    request = pb.GetExtendedAgentCardRequest(tenant="demo/echo")
    error = await rpc_error(server, "GetExtendedAgentCard", request)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(error).reason == "UNSUPPORTED_OPERATION"


async def test_no_token_on_an_authenticated_agent_is_unauthenticated(trio, server):
    error = await rpc_error(server, "ListTasks", pb.ListTasksRequest(tenant="acme/vault"))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details().startswith("Authentication required")
    trailer = dict(error.trailing_metadata())
    assert trailer["www-authenticate"] == 'Bearer realm="a2a/acme/vault"'
    # The SDK client says so too.
    client = await grpc_client(f"{trio.base_url}/a2a/acme/vault/")
    try:
        with pytest.raises(A2AClientError, match="UNAUTHENTICATED"):
            await client.list_tasks(pb.ListTasksRequest())
    finally:
        await client.close()


async def test_no_token_is_unauthenticated_before_a_bad_idempotency_key_is_judged(trio, server):
    request = user_text("hi")
    request.tenant = "acme/vault"
    sent = [("a2a-version", "1.0"), ("idempotency-key", "a b")]
    error = await rpc_error(server, "SendMessage", request, metadata=sent)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_another_tenants_token_is_an_invalid_token_and_a_missing_scope_is_denied(server, tokens):
    request = pb.ListTasksRequest(tenant="acme/vault")
    for token in (tokens["globex"], "not-a-token"):
        error = await rpc_error(
            server, "ListTasks", request, [("a2a-version", "1.0"), ("authorization", f"Bearer {token}")]
        )
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert error.details() == "The access token is invalid, expired or revoked"
        assert 'error="invalid_token"' in dict(error.trailing_metadata())["www-authenticate"]
    metadata = [("a2a-version", "1.0"), ("authorization", f"Bearer {tokens['acme-invoke-only']}")]
    error = await rpc_error(server, "ListTasks", request, metadata)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "a2a:read" in error.details()


async def test_it_hides_other_tenants_agents_and_tasks(trio, server, tokens):
    acme = await grpc_client(f"{trio.base_url}/a2a/acme/vault/", token=tokens["acme"])
    try:
        task_id = [e async for e in acme.send_message(user_text("acme secret"))][0].task.id
    finally:
        await acme.close()
    # charlie's token on his own tenant's agent, asking for acme's task: not found, like a missing one.
    charlie = [("a2a-version", "1.0"), ("authorization", f"Bearer {tokens['globex']}")]
    for wanted in (task_id, str(uuid.uuid4())):
        request = pb.GetTaskRequest(id=wanted, tenant="globex/vault")
        error = await rpc_error(server, "GetTask", request, charlie)
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert error_info(error).reason == "TASK_NOT_FOUND"
        assert error.details() == "Task not found"
    # An agent that does not exist, or is not in the tenant named: the same answer.
    answers = set()
    for tenant in ("globex/lobby", "nobody/vault"):
        error = await rpc_error(server, "GetTask", pb.GetTaskRequest(id=task_id, tenant=tenant), charlie)
        assert error.code() == grpc.StatusCode.NOT_FOUND
        answers.add((error_info(error).reason, error.details().replace(tenant, "<tenant>")))
    assert answers == {("METHOD_NOT_FOUND", "No agent at tenant '<tenant>'")}


@pytest.mark.parametrize(
    "method, request_of",
    [
        # Resolved in the operation's own first trip (a PendingCall) ...
        ("GetTask", lambda tenant: pb.GetTaskRequest(id=str(uuid.uuid4()), tenant=tenant)),
        (
            "SendMessage",
            lambda tenant: pb.SendMessageRequest(message=user_text("order").message, tenant=tenant),
        ),
        # ... and before an operation that takes a resolved Call.
        ("SubscribeToTask", lambda tenant: pb.SubscribeToTaskRequest(id=str(uuid.uuid4()), tenant=tenant)),
    ],
)
async def test_checks_come_in_the_bindings_order_no_agent_then_version_then_caller(
    trio, server, method, request_of
):
    # No agent comes first, even before a missing version.
    error = await rpc_error(server, method, request_of("nobody/vault"), metadata=[])
    assert error.code() == grpc.StatusCode.NOT_FOUND and error_info(error).reason == "METHOD_NOT_FOUND"
    # Then the version, before the caller is judged (no token on an authenticated agent) ...
    error = await rpc_error(server, method, request_of("acme/vault"), metadata=[])
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(error).reason == "VERSION_NOT_SUPPORTED"
    # ... which comes before what the operation itself finds (the task is nobody's).
    error = await rpc_error(server, method, request_of("acme/vault"), metadata=[("a2a-version", "1.0")])
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_unknown_task_is_not_found_with_the_task_not_found_reason(server):
    error = await rpc_error(server, "GetTask", pb.GetTaskRequest(id=str(uuid.uuid4()), tenant="demo/echo"))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    info = error_info(error)
    assert (info.reason, info.domain) == ("TASK_NOT_FOUND", "a2a-protocol.org")
    client = await grpc_client(server.agent_url("echo"))
    try:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id=str(uuid.uuid4())))
        with pytest.raises(TaskNotFoundError):
            [e async for e in client.subscribe(pb.SubscribeToTaskRequest(id=str(uuid.uuid4())))]
    finally:
        await client.close()


async def test_bad_requests_get_their_status_codes(server):
    message = pb.Message(message_id="m-1", role=pb.Role.ROLE_USER, parts=[pb.Part(text="hi")])
    no_version = await rpc_error(
        server, "SendMessage", pb.SendMessageRequest(message=message, tenant="demo/echo"), metadata=[]
    )
    assert no_version.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(no_version).reason == "VERSION_NOT_SUPPORTED"

    not_a_version = await rpc_error(
        server,
        "SendMessage",
        pb.SendMessageRequest(message=message, tenant="demo/echo"),
        metadata=[("a2a-version", "1.x")],
    )
    assert not_a_version.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(not_a_version).reason == "VERSION_NOT_SUPPORTED"

    request = pb.SendMessageRequest(message=message, tenant="demo")
    unaddressed = await rpc_error(server, "SendMessage", request)
    assert unaddressed.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'<tenant>/<agent>'" in unaddressed.details()

    empty_part = pb.Message(message_id="m-2", role=pb.Role.ROLE_USER, parts=[pb.Part()])
    invalid = await rpc_error(
        server, "SendStreamingMessage", pb.SendMessageRequest(message=empty_part, tenant="demo/echo")
    )
    assert invalid.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(invalid).reason == "INVALID_PARAMS"
    assert "has no content" in invalid.details()

    nul = pb.Message(message_id="m-\x003", role=pb.Role.ROLE_USER, parts=[pb.Part(text="hi")])
    refused = await rpc_error(server, "SendMessage", pb.SendMessageRequest(message=nul, tenant="demo/echo"))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT and "NUL" in refused.details()

    page = await rpc_error(server, "ListTasks", pb.ListTasksRequest(tenant="demo/echo", page_size=500))
    assert page.code() == grpc.StatusCode.INVALID_ARGUMENT and "pageSize" in page.details()


@pytest.mark.parametrize(
    ("tenant", "code"),
    [
        ("de mo/echo", grpc.StatusCode.NOT_FOUND),
        ("demo/ech.o", grpc.StatusCode.NOT_FOUND),
        ("demo/echo/extra", grpc.StatusCode.NOT_FOUND),
        ("demo/\x00echo", grpc.StatusCode.INVALID_ARGUMENT),
        ("demo/" + "e" * 10_000, grpc.StatusCode.NOT_FOUND),
        ("demo/" + "é" * 10_000, grpc.StatusCode.NOT_FOUND),
        ("demo/" + "😀" * 10_000, grpc.StatusCode.NOT_FOUND),
        ("../demo/echo", grpc.StatusCode.NOT_FOUND),
        ("/echo", grpc.StatusCode.INVALID_ARGUMENT),
        ("demo/", grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
async def test_a_malformed_tenant_field_is_no_agent_or_invalid_never_an_internal_error(server, tenant, code):
    message = pb.Message(message_id=unique("bad-tenant"), role=pb.Role.ROLE_USER, parts=[pb.Part(text="hi")])
    before = await asyncio.to_thread(stored_counts)
    for method, request in (
        ("SendMessage", pb.SendMessageRequest(message=message, tenant=tenant)),
        ("GetTask", pb.GetTaskRequest(id=str(uuid.uuid4()), tenant=tenant)),
        ("ListTasks", pb.ListTasksRequest(tenant=tenant)),
    ):
        error = await rpc_error(server, method, request)
        assert error.code() == code, (method, error.code(), error.details()[:200])
        if code == grpc.StatusCode.NOT_FOUND:
            assert error_info(error).reason == "METHOD_NOT_FOUND", method
            assert len(error.details().encode()) <= 1024, method
    assert await asyncio.to_thread(stored_counts) == before


@pytest.mark.parametrize("method", ["GetTask", "SendStreamingMessage"])
async def test_request_bytes_that_are_no_message_are_invalid_argument(server, method):
    bad_utf8 = b"\x0a\x01\xff"  # field 1 (a string) holding the byte 0xff
    async with grpc.aio.insecure_channel(server.grpc_target) as channel:
        for raw in (bad_utf8, b"\xff\xff\xff"):
            path = f"/lf.a2a.v1.A2AService/{method}"
            if method == "GetTask":
                call = channel.unary_unary(path)(raw, metadata=[("a2a-version", "1.0")])
            else:
                call = channel.unary_stream(path)(raw, metadata=[("a2a-version", "1.0")])
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                if method == "GetTask":
                    await call
                else:
                    [event async for event in call]
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    # Readable requests still reach the service.
    missing = await rpc_error(server, "GetTask", pb.GetTaskRequest(tenant="demo/echo", id=str(uuid.uuid4())))
    assert missing.code() == grpc.StatusCode.NOT_FOUND


async def test_a_message_to_a_terminal_task_is_unsupported(server):
    client = await grpc_client(server.agent_url("echo"), streaming=False)
    try:
        task = [e async for e in client.send_message(user_text("done soon"))][0].task
    finally:
        await client.close()
    again = user_text("more", task_id=task.id, context_id=task.context_id)
    again.tenant = "demo/echo"
    error = await rpc_error(server, "SendMessage", again)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(error).reason == "UNSUPPORTED_OPERATION"


async def test_a_deadline_on_a_stream_leaves_the_task_running(server):
    """A client that goes away (here: its deadline) ends its stream only; the task completes."""
    client = await grpc_client(server.agent_url("progress"))
    try:
        with pytest.raises(A2AClientError):
            events = client.send_message(user_text("keep going"), context=ClientCallContext(timeout=0.8))
            task_id = None
            async for event in events:
                task_id = task_id or event.task.id
        assert task_id
        for _ in range(100):
            fetched = await client.get_task(pb.GetTaskRequest(id=task_id))
            if fetched.status.state == STATE.TASK_STATE_COMPLETED:
                break
            await asyncio.sleep(0.1)
    finally:
        await client.close()
    assert fetched.status.state == STATE.TASK_STATE_COMPLETED


async def test_a_message_with_an_unknown_role_number_is_invalid(server):
    # Binary protobuf carries enum numbers the ProtoJSON bindings never see.
    message = pb.Message(message_id=f"m-{uuid.uuid4()}", role=99, parts=[pb.Part(text="hi")])
    error = await rpc_error(server, "SendMessage", pb.SendMessageRequest(message=message, tenant="demo/echo"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ROLE_USER" in error.details()


def test_a_second_server_on_a_taken_grpc_port_fails_to_start(server):
    from django.core.management.base import CommandError

    from a2a_platform.management.commands.grpcserve import start_grpc_thread

    host, port = server.grpc_target.split(":")
    with pytest.raises(CommandError, match="cannot listen"):
        start_grpc_thread(host, int(port), server.base_url)


@pytest.fixture
def rate_limited(stored):
    """A tenant of its own allowing one request a minute, made outside the tests' event loop."""
    from tests.tasks_app.test_quotas import fresh_minute, make_tenant

    tenant = make_tenant(rate_limit_per_minute=1)
    fresh_minute()
    return tenant


async def test_a_quota_refusal_is_resource_exhausted_with_the_retry_time(server, rate_limited):
    def send() -> pb.SendMessageRequest:
        request = user_text("hi", message_id=str(uuid.uuid4()))
        request.tenant = f"{rate_limited.slug}/open"
        return request

    answer = await raw_call(server, "SendMessage", send())
    assert answer.task.status.state == STATE.TASK_STATE_COMPLETED
    error = await rpc_error(server, "SendMessage", send())
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most 1 request" in error.details()
    info = error_info(error)
    assert info is not None and info.reason == "RATE_LIMIT_EXCEEDED" and info.metadata["limit"] == "1"
    retry = error_details_pb2.RetryInfo()
    assert [d.Unpack(retry) for d in status_from_call(error).details if d.Is(retry.DESCRIPTOR)] == [True]
    assert 1 <= retry.retry_delay.seconds <= 60


async def test_an_idempotency_key_in_the_metadata_makes_a_retry_answer_the_first_task(server):
    request = user_text("once", message_id=str(uuid.uuid4()))
    request.tenant = "demo/echo"
    metadata = [("a2a-version", "1.0"), ("idempotency-key", f"grpc-{uuid.uuid4().hex}")]
    first = await raw_call(server, "SendMessage", request, metadata)
    again = await raw_call(server, "SendMessage", request, metadata)
    assert first.task.id and again.task.id == first.task.id
    other = await raw_call(server, "SendMessage", request, [("a2a-version", "1.0")])
    assert other.task.id != first.task.id
    request.message.parts[0].text = "another body"
    error = await rpc_error(server, "SendMessage", request, metadata)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
