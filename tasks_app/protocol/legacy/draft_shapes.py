"""Draft (0.1) shapes: draft params to A2A 1.0 ProtoJSON and 1.0 results back.

Parts are typed `type: text|file|data`; the `TextPart|FilePart|DataPart`
spelling that circulates in examples is accepted too, and answered in kind.
"""

import uuid
from dataclasses import dataclass

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError

from tasks_app.events import closes_stream
from tasks_app.protocol.convert import PROTO_NAME_TO_STATE
from tasks_app.protocol.legacy.common import parse_proto
from tasks_app.protocol.validation import check_required_fields, check_text, check_values, is_base64

PART_TYPES = {
    "text": "text",
    "file": "file",
    "data": "data",
    "TextPart": "text",
    "FilePart": "file",
    "DataPart": "data",
}
SPELLINGS = {
    "spec": {"text": "text", "file": "file", "data": "data"},
    "example": {"text": "TextPart", "file": "FilePart", "data": "DataPart"},
}
ROLES = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
MAX_ID_LENGTH = 255


# Requests: draft -> 1.0 ProtoJSON


def text_field(params: dict, name: str, *, required: bool = False) -> str | None:
    value = params.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
        raise InvalidParamsError(
            message=f"Invalid params: '{name}' must be a string of 1 to {MAX_ID_LENGTH} characters"
        )
    check_text(value, name)
    return value


def _part_to_core(part, where: str) -> dict:
    if not isinstance(part, dict):
        raise InvalidParamsError(message=f"Invalid params: {where} must be an object")
    tag = part.get("type") or part.get("kind")
    kind = PART_TYPES.get(tag) if isinstance(tag, str) else None
    core: dict = {}
    if kind == "text" and isinstance(part.get("text"), str):
        core["text"] = part["text"]
    elif kind == "file" and isinstance(part.get("file"), dict):
        file = part["file"]
        if isinstance(file.get("bytes"), str) and "uri" not in file:
            # base64 in both dialects; protobuf would decode a malformed one leniently
            if not is_base64(file["bytes"]):
                raise InvalidParamsError(message=f"Invalid params: {where}.file.bytes is not valid base64")
            core["raw"] = file["bytes"]
        elif isinstance(file.get("uri"), str) and "bytes" not in file:
            core["url"] = file["uri"]
        else:
            raise InvalidParamsError(
                message=f"Invalid params: {where}.file needs exactly one of bytes or uri"
            )
        if isinstance(file.get("mimeType"), str):
            core["mediaType"] = file["mimeType"]
        if isinstance(file.get("name"), str):
            core["filename"] = file["name"]
    elif kind == "data" and isinstance(part.get("data"), dict):
        core["data"] = part["data"]
    else:
        raise InvalidParamsError(
            message=f"Invalid params: {where} must be a text, file or data part "
            "(type 'text'|'file'|'data' or 'TextPart'|'FilePart'|'DataPart', with its content)"
        )
    if isinstance(part.get("metadata"), dict):
        core["metadata"] = part["metadata"]
    return core


@dataclass
class SendParams:
    task_id: str
    request: pb.SendMessageRequest
    spelling: str


def parse_send(params: dict) -> SendParams:
    # All of them, the keys it ignores too: the whole params are the send's key (draft._request_key).
    check_values(params)
    task_id = text_field(params, "id", required=True)
    session_id = text_field(params, "sessionId")
    message = params.get("message")
    if not isinstance(message, dict):
        raise InvalidParamsError(message="Invalid params: 'message' must be an object")
    if message.get("role") != "user":
        raise InvalidParamsError(message="Invalid params: message.role must be 'user'")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise InvalidParamsError(message="Invalid params: message.parts must be a non-empty array")
    history_length = params.get("historyLength")
    if history_length is not None and (
        isinstance(history_length, bool) or not isinstance(history_length, int) or history_length < 0
    ):
        raise InvalidParamsError(message="Invalid params: historyLength must be a non-negative integer")
    push = params.get("pushNotification")
    if push is not None and not (isinstance(push, dict) and isinstance(push.get("url"), str) and push["url"]):
        raise InvalidParamsError(message="Invalid params: pushNotification needs a 'url'")
    for name in ("metadata",):
        if params.get(name) is not None and not isinstance(params[name], dict):
            raise InvalidParamsError(message=f"Invalid params: '{name}' must be an object")
    if message.get("metadata") is not None and not isinstance(message["metadata"], dict):
        raise InvalidParamsError(message="Invalid params: message.metadata must be an object")

    core_message = {
        # The draft has no message ids; each send is a new message.
        "messageId": f"draft-{uuid.uuid4()}",
        "role": "ROLE_USER",
        "parts": [_part_to_core(part, f"message.parts[{i}]") for i, part in enumerate(parts)],
    }
    if session_id:
        core_message["contextId"] = session_id
    if message.get("metadata"):
        core_message["metadata"] = message["metadata"]
    request = {"message": core_message}
    if params.get("metadata"):
        request["metadata"] = params["metadata"]
    if history_length:  # as in 0.3: 0 and unset both mean the whole history
        request["configuration"] = {"historyLength": history_length}
    if push:
        # The 1.0 way to register a webhook with a message: message_send checks
        # and stores it with the task, so a refused URL leaves nothing behind.
        request.setdefault("configuration", {})["taskPushNotificationConfig"] = core_push_config(push)
    parsed = parse_proto(request, pb.SendMessageRequest())
    check_required_fields(parsed)
    spelling = "example" if any(str(p.get("type", "")).endswith("Part") for p in parts) else "spec"
    return SendParams(task_id, parsed, spelling)


def core_push_config(push: dict) -> dict:
    config = {"url": push["url"]}
    if isinstance(push.get("token"), str):
        config["token"] = push["token"]
    auth = push.get("authentication")
    if isinstance(auth, dict) and isinstance(auth.get("schemes"), list) and auth["schemes"]:
        config["authentication"] = {"scheme": str(auth["schemes"][0])}
        if isinstance(auth.get("credentials"), str):
            config["authentication"]["credentials"] = auth["credentials"]
    return config


# Results: 1.0 ProtoJSON -> draft


def draft_part(part: dict, spelling: str) -> dict:
    names = SPELLINGS[spelling]
    if "text" in part:
        data = {"type": names["text"], "text": part["text"]}
    elif "raw" in part or "url" in part:
        file = {"bytes": part["raw"]} if "raw" in part else {"uri": part["url"]}
        if part.get("mediaType"):
            file["mimeType"] = part["mediaType"]
        if part.get("filename"):
            file["name"] = part["filename"]
        data = {"type": names["file"], "file": file}
    else:
        value = part.get("data")
        # Draft data parts hold objects; 1.0 allows any JSON value.
        data = {"type": names["data"], "data": value if isinstance(value, dict) else {"value": value}}
    if part.get("metadata"):
        data["metadata"] = part["metadata"]
    return data


def draft_message(message: dict, spelling: str) -> dict:
    data = {
        "role": ROLES.get(message.get("role"), "agent"),
        "parts": [draft_part(p, spelling) for p in message["parts"]],
    }
    if message.get("metadata"):
        data["metadata"] = message["metadata"]
    return data


def draft_status(status: dict, spelling: str) -> dict:
    state = PROTO_NAME_TO_STATE.get(status.get("state"))
    data = {"state": state.value if state else "unknown"}
    if status.get("message"):
        data["message"] = draft_message(status["message"], spelling)
    if status.get("timestamp"):
        data["timestamp"] = status["timestamp"]
    return data


def draft_artifact(artifact: dict, index: int, spelling: str) -> dict:
    data = {"parts": [draft_part(p, spelling) for p in artifact.get("parts", [])], "index": index}
    for name in ("name", "description", "metadata"):
        if artifact.get(name):
            data[name] = artifact[name]
    return data


def draft_task(task: dict, display_id: str, spelling: str) -> dict:
    data = {
        "id": display_id,
        "sessionId": task["contextId"],
        "status": draft_status(task["status"], spelling),
    }
    if task.get("artifacts"):
        data["artifacts"] = [draft_artifact(a, i, spelling) for i, a in enumerate(task["artifacts"])]
    if task.get("history"):
        data["history"] = [draft_message(m, spelling) for m in task["history"]]
    if task.get("metadata"):
        data["metadata"] = task["metadata"]
    return data


class DraftEvents:
    """Converts one task's 1.0 stream to draft status/artifact events."""

    def __init__(self, display_id: str, spelling: str, known_artifacts: list[str], replay_artifacts: bool):
        self.display_id = display_id
        self.spelling = spelling
        self.artifacts = list(known_artifacts)
        # A resubscriber gets the artifacts made so far from the opening snapshot.
        self.replay_artifacts = replay_artifacts

    def _index(self, artifact_id: str) -> int:
        if artifact_id not in self.artifacts:
            self.artifacts.append(artifact_id)
        return self.artifacts.index(artifact_id)

    def _artifact_event(self, artifact: dict, update: dict | None = None) -> dict:
        data = draft_artifact(artifact, self._index(artifact.get("artifactId", "")), self.spelling)
        if update:
            if update.get("append"):
                data["append"] = True
            if update.get("lastChunk"):
                data["lastChunk"] = True
        event = {"id": self.display_id, "artifact": data}
        if update and update.get("metadata"):
            event["metadata"] = update["metadata"]
        return event

    def convert(self, payload: dict) -> list[dict]:
        final = closes_stream(payload)
        if "task" in payload:
            task = payload["task"]
            events = []
            if self.replay_artifacts:
                events = [self._artifact_event(a) for a in task.get("artifacts", [])]
            status = {
                "id": self.display_id,
                "status": draft_status(task["status"], self.spelling),
                "final": final,
            }
            return [*events, status]
        if "statusUpdate" in payload:
            update = payload["statusUpdate"]
            event = {
                "id": self.display_id,
                "status": draft_status(update["status"], self.spelling),
                "final": final,
            }
            if update.get("metadata"):
                event["metadata"] = update["metadata"]
            return [event]
        if "artifactUpdate" in payload:
            update = payload["artifactUpdate"]
            return [self._artifact_event(update["artifact"], update)]
        # Bare messages never reach a task's log: the worker stores them as a status.
        return []


def event_name(payload: dict) -> str | None:
    result = payload.get("result") or {}
    if "status" in result:
        return "status"
    if "artifact" in result:
        return "artifact"
    return None
