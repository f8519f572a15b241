"""The 0.1 draft dialect: tasks/send, tasks/sendSubscribe, client-chosen task ids.

Draft clients name their tasks. An unknown `id` on tasks/send creates a task
and a DraftTaskAlias with that id, in one transaction; a known one continues the task,
which is how the draft answers input-required. The draft has no Idempotency-Key,
and its client retries with the same body: the body is the key (`_request_key`), so a
resend is answered with the task it stored, not refused as a follow-up. Every answer shows the
client's id, never our UUID. `sessionId` is the contextId. Parts are typed
`type: text|file|data`; the `TextPart|FilePart|DataPart` spelling that
circulates in examples is accepted too, and answered in kind (draft_shapes).

Answers to tasks/get, tasks/cancel and tasks/resubscribe use the spec's
spelling: the spelling a task was created with is not stored.
"""

import hashlib
import json

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
)
from django.db import IntegrityError

from tasks_app.db import db
from tasks_app.models import DraftTaskAlias, Task
from tasks_app.protocol.legacy.common import (
    Exchange,
    artifact_ids,
    draft_id,
    find_task,
    has_operation,
    parse_proto,
    run,
    translated,
)
from tasks_app.protocol.legacy.draft_shapes import (
    DraftEvents,
    core_push_config,
    draft_task,
    event_name,
    parse_send,
    text_field,
)
from tasks_app.services import message_send

# The draft schema knows the standard codes and -32001..-32004 only.
ERROR_CODES = frozenset({-32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003, -32004})


def _request_key(params: dict) -> str:
    """An Idempotency-Key for a draft send: its params, whose `id` names the task."""
    body = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return "draft:" + hashlib.sha256(body.encode()).hexdigest()


def _send_as(client_task_id: str):
    """message_send for a new task named by the client: the task and its alias commit together.

    An id another task of this caller's holds raises IntegrityError, and nothing is stored.
    """

    def send(caller, request, **options):
        def alias(outcome) -> None:
            DraftTaskAlias.objects.create(
                task=outcome.task, agent=caller.agent, owner=outcome.task.owner, client_task_id=client_task_id
            )

        return _send_keyed(caller, request, with_task=alias, **options)

    return send


async def _send(ex: Exchange, streaming: bool):
    send = parse_send(ex.params)
    method = "SendStreamingMessage" if streaming else "SendMessage"
    call = await ex.call(method)
    # A draft client names its task itself and has no Idempotency-Key; its messageIds are made
    # up here per request. Its retry is the same body: that is the key, and no header counts.
    call.idempotency_key = _request_key(ex.params)
    task = await db(find_task, call.caller, send.task_id)
    options = {"send": _send_keyed}
    if task is not None:
        # A known id: the message continues that task (the draft's input-required answer).
        ex.show_client_id(task)
        send.request.message.task_id = str(task.pk)
        display_id = draft_id(task) or str(task.pk)
    else:
        display_id = send.task_id
        options["send"] = _send_as(send.task_id)
    try:
        result = await run(method, call, send.request, **options)
    except IntegrityError:
        # A concurrent send of this caller took that id first.
        raise InvalidParamsError(message=f"Task id '{send.task_id}' cannot be used; choose another") from None
    if streaming:
        known = await db(artifact_ids, task.pk) if task is not None else []
        converter = DraftEvents(display_id, send.spelling, known, replay_artifacts=False)
        return ex.stream(translated(result, converter.convert), event_name)
    return ex.result(draft_task(result["task"], display_id, send.spelling))


def _send_keyed(caller, request, **options):
    """message_send as the draft sends: keyed by the request's params, and answered with the task.

    A draft client names its task, so the answer is that task, whatever the agent says.
    """
    return message_send(caller, request, reply_as_message=False, key_from_request=True, **options)


async def tasks_send(ex: Exchange):
    return await _send(ex, streaming=False)


async def tasks_send_subscribe(ex: Exchange):
    return await _send(ex, streaming=True)


# tasks/get, tasks/cancel and tasks/resubscribe on a task a draft client created.


async def get_task(ex: Exchange, call, task: Task, params):
    request = pb.GetTaskRequest(id=str(task.pk))
    if params.history_length:
        request.history_length = params.history_length
    return ex.result(draft_task(await run("GetTask", call, request), draft_id(task), "spec"))


async def cancel_task(ex: Exchange, call, task: Task, params):
    result = await run("CancelTask", call, pb.CancelTaskRequest(id=str(task.pk)))
    return ex.result(draft_task(result, draft_id(task), "spec"))


async def resubscribe(ex: Exchange, call, task: Task, params):
    events = await run("SubscribeToTask", call, pb.SubscribeToTaskRequest(id=str(task.pk)))
    # A fresh subscription opens with a snapshot that replays the artifacts made so
    # far; one resuming after Last-Event-ID does not, so it takes their order from the store.
    fresh = call.last_event_id is None
    known = [] if fresh else await db(artifact_ids, task.pk)
    converter = DraftEvents(draft_id(task), "spec", known, replay_artifacts=fresh)
    return ex.stream(translated(events, converter.convert), event_name)


# Push notifications, one config per task in the draft.

NO_PUSH = PushNotificationNotSupportedError(message="Push notifications are not supported by this agent")


def _draft_push(config: dict, display_id: str) -> dict:
    push = {"url": config.get("url", "")}
    if config.get("token"):
        push["token"] = config["token"]
    auth = config.get("authentication")
    if auth:
        push["authentication"] = {"schemes": [auth["scheme"]] if auth.get("scheme") else []}
        if auth.get("credentials"):
            push["authentication"]["credentials"] = auth["credentials"]
    return {"id": display_id, "pushNotificationConfig": push}


async def _draft_task_for(ex: Exchange, method: str):
    task_id = text_field(ex.params, "id", required=True)
    call = await ex.call(method)
    task = await db(find_task, call.caller, task_id)
    if task is None:
        raise TaskNotFoundError()
    ex.show_client_id(task)
    return call, task, draft_id(task) or str(task.pk)


async def push_set(ex: Exchange):
    push = ex.params.get("pushNotificationConfig")
    if not (isinstance(push, dict) and isinstance(push.get("url"), str) and push["url"]):
        raise InvalidParamsError(message="Invalid params: pushNotificationConfig needs a 'url'")
    if not has_operation("CreateTaskPushNotificationConfig"):
        raise NO_PUSH
    call, task, display_id = await _draft_task_for(ex, "CreateTaskPushNotificationConfig")
    config = parse_proto({**core_push_config(push), "taskId": str(task.pk)}, pb.TaskPushNotificationConfig())
    return ex.result(
        _draft_push(await run("CreateTaskPushNotificationConfig", call, config, NO_PUSH), display_id)
    )


async def push_get(ex: Exchange):
    if not has_operation("ListTaskPushNotificationConfigs"):
        raise NO_PUSH
    call, task, display_id = await _draft_task_for(ex, "ListTaskPushNotificationConfigs")
    request = pb.ListTaskPushNotificationConfigsRequest(task_id=str(task.pk))
    configs = (await run("ListTaskPushNotificationConfigs", call, request, NO_PUSH)).get("configs", [])
    if not configs:
        raise InvalidParamsError(message=f"Task {display_id} has no push notification config")
    return ex.result(_draft_push(configs[0], display_id))


HANDLERS = {
    "tasks/send": tasks_send,
    "tasks/sendSubscribe": tasks_send_subscribe,
    "tasks/pushNotification/set": push_set,
    "tasks/pushNotification/get": push_get,
}
TASK_HANDLERS = {"tasks/get": get_task, "tasks/cancel": cancel_task, "tasks/resubscribe": resubscribe}
