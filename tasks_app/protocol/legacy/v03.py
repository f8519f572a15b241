"""The A2A 0.3 JSON-RPC dialect: kind-tagged objects, lowercase enums, bare results.

Shapes are converted with a2a-sdk's own 0.3 compat layer. Following the SDK,
an absent `blocking` means blocking and a historyLength of 0 means "all".
"""

import logging

from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import ParseDict, ParseError
from google.protobuf.message import Error as ProtobufError

from tasks_app.events import closes_stream
from tasks_app.models import Task
from tasks_app.protocol.legacy.common import Exchange, parse_model, parse_proto, run, translated
from tasks_app.protocol.validation import standard_base64

logger = logging.getLogger(__name__)

ERROR_CODES = frozenset(
    {-32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003, -32004, -32005, -32006, -32007}
)


def dump(model) -> dict | list:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


# A stored part 0.3 can show has one of these (1.0 Part's content oneof).
PART_CONTENT_KEYS = ("text", "raw", "url", "data")


def _showable(holder, where: str):
    """A stored message or artifact without the parts 0.3 cannot show (logged), else itself.

    Rows stored before sends were checked may hold parts without content; the
    SDK's conversion raises on those, which would make the whole task unreadable.
    """
    if not isinstance(holder, dict) or not isinstance(holder.get("parts"), list):
        return holder
    parts = holder["parts"]
    kept = [
        part for part in parts if isinstance(part, dict) and any(key in part for key in PART_CONTENT_KEYS)
    ]
    if len(kept) == len(parts):
        return holder
    logger.warning("Left out %d stored part(s) without content from %s", len(parts) - len(kept), where)
    return {**holder, "parts": kept}


def _showable_status(holder: dict, where: str) -> dict:
    status = holder.get("status")
    if isinstance(status, dict) and "message" in status:
        return {**holder, "status": {**status, "message": _showable(status["message"], where)}}
    return holder


def _showable_task(task: dict) -> dict:
    where = f"task {task.get('id')}"
    task = _showable_status(task, where)
    for key in ("history", "artifacts"):
        if isinstance(task.get(key), list):
            task = {**task, key: [_showable(item, where) for item in task[key]]}
    return task


def _showable_payload(payload: dict) -> dict:
    """A StreamResponse dict without the stored parts 0.3 cannot show."""
    if isinstance(payload.get("task"), dict):
        return {**payload, "task": _showable_task(payload["task"])}
    if isinstance(payload.get("statusUpdate"), dict):
        update = payload["statusUpdate"]
        return {**payload, "statusUpdate": _showable_status(update, f"task {update.get('taskId')}")}
    if isinstance(payload.get("artifactUpdate"), dict):
        update = payload["artifactUpdate"]
        artifact = _showable(update.get("artifact"), f"task {update.get('taskId')}")
        return {**payload, "artifactUpdate": {**update, "artifact": artifact}}
    if "message" in payload:
        return {**payload, "message": _showable(payload["message"], "a message")}
    return payload


def compat_task(task: dict) -> dict:
    parsed = ParseDict(_showable_task(task), pb.Task(), ignore_unknown_fields=True)
    return dump(conversions.to_compat_task(parsed))


def compat_send_result(result: dict) -> dict:
    if "message" in result:
        message = _showable_payload({"message": result["message"]})["message"]
        return dump(conversions.to_compat_message(ParseDict(message, pb.Message())))
    return compat_task(result["task"])


def compat_event(payload: dict) -> list[dict]:
    response = ParseDict(_showable_payload(payload), pb.StreamResponse(), ignore_unknown_fields=True)
    result = dump(conversions.to_compat_stream_response(response).result)
    if result.get("kind") == "status-update":
        # 0.3 clients stop reading at final:true. Our streams also end on
        # input-required / auth-required, so "final" means "the stream ends here".
        result["final"] = closes_stream(payload)
    return [result]


def compat_push_config(config: dict) -> dict:
    return dump(
        conversions.to_compat_task_push_notification_config(
            ParseDict(config, pb.TaskPushNotificationConfig())
        )
    )


def _check_file_bytes(message: types_v03.Message) -> None:
    """File bytes checked as the 1.0 binding checks them (either alphabet, padding optional),
    then handed on in the standard alphabet, padded.

    The SDK's conversion decodes the standard alphabet leniently: it drops any other
    character (the URL-safe "-" and "_" among them), which would store other bytes
    than were sent.
    """
    for index, part in enumerate(message.parts):
        file = getattr(part.root, "file", None)
        if isinstance(file, types_v03.FileWithBytes):
            standard = standard_base64(file.bytes)
            if standard is None:
                raise InvalidParamsError(
                    message=f"Invalid params: message.parts[{index}].file.bytes is not base64"
                )
            file.bytes = standard


def send_request(params: types_v03.MessageSendParams) -> pb.SendMessageRequest:
    _check_file_bytes(params.message)
    try:
        request = pb.SendMessageRequest(message=conversions.to_core_message(params.message))
        if params.configuration:
            request.configuration.CopyFrom(
                conversions.to_core_send_message_configuration(params.configuration)
            )
        if params.metadata:
            ParseDict(params.metadata, request.metadata)
    except (ValueError, TypeError, KeyError, ParseError, ProtobufError) as exc:
        # bad base64, odd data parts, data nested deeper than protobuf allows
        raise InvalidParamsError(message=f"Invalid params: {exc}") from None
    return request


async def message_send(ex: Exchange):
    request = send_request(parse_model(types_v03.MessageSendParams, ex.params))
    call = await ex.call("SendMessage")
    return ex.result(compat_send_result(await run("SendMessage", call, request)))


async def message_stream(ex: Exchange):
    request = send_request(parse_model(types_v03.MessageSendParams, ex.params))
    call = await ex.call("SendStreamingMessage")
    events = await run("SendStreamingMessage", call, request)
    return ex.stream(translated(events, compat_event))


# tasks/get, tasks/cancel and tasks/resubscribe: the dispatcher found the task already.


async def get_task(ex: Exchange, call, task: Task, params: types_v03.TaskQueryParams):
    request = pb.GetTaskRequest(id=str(task.pk))
    if params.history_length:  # 0.3: 0 and unset both mean the whole history
        request.history_length = params.history_length
    return ex.result(compat_task(await run("GetTask", call, request)))


async def cancel_task(ex: Exchange, call, task: Task, params: types_v03.TaskQueryParams):
    return ex.result(compat_task(await run("CancelTask", call, pb.CancelTaskRequest(id=str(task.pk)))))


async def resubscribe(ex: Exchange, call, task: Task, params: types_v03.TaskQueryParams):
    events = await run("SubscribeToTask", call, pb.SubscribeToTaskRequest(id=str(task.pk)))
    return ex.stream(translated(events, compat_event))


# Push-notification configs: 0.3 nests the config, 1.0 flattens it.

NO_PUSH = PushNotificationNotSupportedError(message="Push notifications are not supported by this agent")


async def push_set(ex: Exchange):
    params = parse_model(types_v03.TaskPushNotificationConfig, ex.params)
    try:
        request = conversions.to_core_task_push_notification_config(params)
    except (ValueError, TypeError) as exc:
        raise InvalidParamsError(message=f"Invalid params: {exc}") from None
    call = await ex.call("CreateTaskPushNotificationConfig")
    return ex.result(
        compat_push_config(await run("CreateTaskPushNotificationConfig", call, request, NO_PUSH))
    )


async def push_get(ex: Exchange):
    # The params may be TaskIdParams ({id}) or GetTaskPushNotificationConfigParams.
    params = parse_model(types_v03.GetTaskPushNotificationConfigParams, ex.params)
    call = await ex.call("GetTaskPushNotificationConfig")
    if params.push_notification_config_id:
        request = pb.GetTaskPushNotificationConfigRequest(
            task_id=params.id, id=params.push_notification_config_id
        )
        return ex.result(
            compat_push_config(await run("GetTaskPushNotificationConfig", call, request, NO_PUSH))
        )
    # Without a config id, 0.3 meant "the task's config": the first one.
    listing = await run(
        "ListTaskPushNotificationConfigs",
        call,
        pb.ListTaskPushNotificationConfigsRequest(task_id=params.id),
        NO_PUSH,
    )
    configs = listing.get("configs", [])
    if not configs:
        raise InvalidParamsError(message=f"Task {params.id} has no push notification config")
    return ex.result(compat_push_config(configs[0]))


async def push_list(ex: Exchange):
    params = parse_model(types_v03.ListTaskPushNotificationConfigParams, ex.params)
    call = await ex.call("ListTaskPushNotificationConfigs")
    request = pb.ListTaskPushNotificationConfigsRequest(task_id=params.id)
    listing = await run("ListTaskPushNotificationConfigs", call, request, NO_PUSH)
    # 0.3 answers a bare array (paging came with 1.0).
    return ex.result([compat_push_config(config) for config in listing.get("configs", [])])


async def push_delete(ex: Exchange):
    params = parse_model(types_v03.DeleteTaskPushNotificationConfigParams, ex.params)
    call = await ex.call("DeleteTaskPushNotificationConfig")
    request = pb.DeleteTaskPushNotificationConfigRequest(
        task_id=params.id, id=params.push_notification_config_id
    )
    await run("DeleteTaskPushNotificationConfig", call, request, NO_PUSH)
    return ex.result(None)


async def extended_card(ex: Exchange):
    call = await ex.call("GetExtendedAgentCard")
    missing = ExtendedAgentCardNotConfiguredError(message="This agent has no authenticated extended card")
    try:
        card = await run("GetExtendedAgentCard", call, pb.GetExtendedAgentCardRequest(), missing)
    except UnsupportedOperationError as error:
        # 1.0 says "unsupported"; 0.3 had its own code for exactly this case.
        raise ExtendedAgentCardNotConfiguredError(message=error.message) from None
    parsed = parse_proto(card, pb.AgentCard())
    return ex.result(dump(conversions.to_compat_agent_card(parsed)))


HANDLERS = {
    "message/send": message_send,
    "message/stream": message_stream,
    "tasks/pushNotificationConfig/set": push_set,
    "tasks/pushNotificationConfig/get": push_get,
    "tasks/pushNotificationConfig/list": push_list,
    "tasks/pushNotificationConfig/delete": push_delete,
    "agent/getAuthenticatedExtendedCard": extended_card,
}
TASK_HANDLERS = {"tasks/get": get_task, "tasks/cancel": cancel_task, "tasks/resubscribe": resubscribe}
