"""The one place where stored rows become A2A 1.0 ProtoJSON and back.

Rows keep parts and metadata in ProtoJSON already, so output is assembled as
plain dicts (no protobuf round trip on the hot path); input is parsed and
normalised through a2a-sdk's protobuf types.
"""

from datetime import datetime

from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict

from tasks_app.models import Artifact, Message, Task, TaskState

STATE_TO_PROTO_NAME = {
    TaskState.SUBMITTED: "TASK_STATE_SUBMITTED",
    TaskState.WORKING: "TASK_STATE_WORKING",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.AUTH_REQUIRED: "TASK_STATE_AUTH_REQUIRED",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.REJECTED: "TASK_STATE_REJECTED",
}
PROTO_NAME_TO_STATE = {name: state for state, name in STATE_TO_PROTO_NAME.items()}
PROTO_TO_STATE = {pb.TaskState.Value(name): state for name, state in PROTO_NAME_TO_STATE.items()}
ROLE_TO_PROTO_NAME = {Message.Role.USER: "ROLE_USER", Message.Role.AGENT: "ROLE_AGENT"}


def proto_to_dict(message) -> dict:
    return MessageToDict(message, preserving_proto_field_name=False)


def timestamp(value: datetime) -> str:
    """ISO-8601 UTC with millisecond precision and a Z suffix, as ProtoJSON prints it.

    For the aware UTC datetimes the database and timezone.now() give (USE_TZ):
    isoformat()'s first 23 characters are the date and time to the
    millisecond, in 60% of strftime's time.
    """
    return value.isoformat(timespec="milliseconds")[:23] + "Z"


def message_dict(message: Message, context_id: str) -> dict:
    return message_fields(
        message.message_id,
        context_id,
        message.role,
        message.parts,
        task_id=str(message.task_id) if message.task_id else None,
        metadata=message.metadata,
        extensions=message.extensions,
        reference_task_ids=message.reference_task_ids,
    )


def message_fields(
    message_id: str,
    context_id: str,
    role: str,
    parts: list,
    *,
    task_id: str | None,
    metadata: dict | None,
    extensions: list | None,
    reference_task_ids: list | None,
) -> dict:
    """A stored message in ProtoJSON, from its column values (a page of history is read as rows)."""
    data = {
        "messageId": message_id,
        "contextId": context_id,
        "role": ROLE_TO_PROTO_NAME[role],
        "parts": parts,
    }
    if task_id:
        data["taskId"] = task_id
    if metadata:
        data["metadata"] = metadata
    if extensions:
        data["extensions"] = extensions
    if reference_task_ids:
        data["referenceTaskIds"] = reference_task_ids
    return data


def artifact_dict(artifact: Artifact) -> dict:
    data = {"artifactId": artifact.artifact_id, "parts": artifact.parts}
    if artifact.name:
        data["name"] = artifact.name
    if artifact.description:
        data["description"] = artifact.description
    if artifact.metadata:
        data["metadata"] = artifact.metadata
    if artifact.extensions:
        data["extensions"] = artifact.extensions
    return data


def status_dict(task: Task) -> dict:
    message = task.status_message
    return status_fields(
        task.state,
        task.status_timestamp,
        None if message is None else message_dict(message, task.context.context_id),
    )


def status_fields(state: str, status_timestamp: datetime, message: dict | None) -> dict:
    """A TaskStatus in ProtoJSON from its column values (a list of tasks is read as rows)."""
    status = {"state": STATE_TO_PROTO_NAME[state], "timestamp": timestamp(status_timestamp)}
    if message is not None:
        status["message"] = message
    return status


def task_dict(
    task: Task,
    *,
    messages: list[Message] | None = None,
    artifacts: list[Artifact] | None = None,
    history_length: int | None = None,
    history: list[dict] | None = None,
) -> dict:
    """A Task in ProtoJSON.

    history_length follows the spec: None = everything we keep, 0 = no history,
    N = the N most recent messages. The current status message is not repeated
    in the history. `history`, instead of `messages`: the history as it is
    answered, already in ProtoJSON (a page read by selectors).
    """
    context_id = task.context.context_id
    if messages and history_length != 0:
        # A message not stored yet (pk None) is never the status message.
        kept = [m for m in messages if m.pk is None or m.pk != task.status_message_id]
        if history_length is not None:
            kept = kept[-history_length:]
        history = [message_dict(m, context_id) for m in kept]
    return task_fields(
        str(task.id),
        context_id,
        status_dict(task),
        artifacts=[artifact_dict(a) for a in artifacts] if artifacts else None,
        history=history if history_length != 0 else None,
        metadata=task.metadata,
    )


def task_fields(
    task_id: str,
    context_id: str,
    status: dict,
    *,
    artifacts: list[dict] | None = None,
    history: list[dict] | None = None,
    metadata: dict | None = None,
) -> dict:
    """A Task in ProtoJSON from its parts already in ProtoJSON (a list of tasks is read as rows)."""
    data = {"id": task_id, "contextId": context_id, "status": status}
    if artifacts:
        data["artifacts"] = artifacts
    if history:
        data["history"] = history
    if metadata:
        data["metadata"] = metadata
    return data


def status_update_dict(task: Task, metadata: dict | None = None) -> dict:
    event = {
        "taskId": str(task.id),
        "contextId": task.context.context_id,
        "status": status_dict(task),
    }
    if metadata:
        event["metadata"] = metadata
    return event
