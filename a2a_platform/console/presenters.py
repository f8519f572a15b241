"""Stored ProtoJSON (parts, event payloads) turned into plain values for templates.

Templates only ever print these values with autoescaping on; nothing here
builds HTML. That is what keeps agent output inert in the browser.
"""

import json
from dataclasses import dataclass

from tasks_app.events import payload_state
from tasks_app.models import INTERRUPTED_STATES, TaskState
from tasks_app.selectors import first_requests, principal_names

PREVIEW_CHARS = 160


@dataclass
class PartView:
    kind: str  # "text", "data", "file" or "url"
    index: int
    text: str = ""
    filename: str = ""
    media_type: str = ""
    url: str = ""
    size: int | None = None


def part_views(parts) -> list[PartView]:
    views = []
    for index, part in enumerate(parts or []):
        if not isinstance(part, dict):
            continue
        media_type = str(part.get("mediaType", ""))
        filename = str(part.get("filename", ""))
        if "text" in part:
            views.append(PartView("text", index, text=str(part["text"]), media_type=media_type))
        elif "data" in part:
            data = json.dumps(part["data"], indent=2, ensure_ascii=False, sort_keys=True)
            views.append(PartView("data", index, text=data, media_type=media_type))
        elif "raw" in part:
            # base64 in ProtoJSON: 4 characters carry 3 bytes.
            size = len(str(part["raw"])) * 3 // 4
            views.append(
                PartView(
                    "file", index, filename=filename or f"part-{index}", media_type=media_type, size=size
                )
            )
        elif "url" in part:
            url = str(part["url"])
            # Only web links become clickable; a javascript: or data: URL stays plain text.
            safe = url if url.lower().startswith(("https://", "http://")) else ""
            views.append(PartView("url", index, text=url, url=safe, filename=filename, media_type=media_type))
    return views


def parts_text(parts, limit: int = PREVIEW_CHARS) -> str:
    """A one-line preview of the text parts, for lists."""
    texts = [str(part["text"]) for part in parts or [] if isinstance(part, dict) and "text" in part]
    text = " ".join(" ".join(texts).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


STATE_LABELS = dict(TaskState.choices)


@dataclass
class TimelineEntry:
    seq: int
    at: object
    kind: str
    state: str = ""
    state_label: str = ""
    text: str = ""


def task_rows(tasks) -> list[dict]:
    """Rows for the list templates; the preview comes from the select_related status message."""
    rows = []
    for task in tasks:
        message = task.status_message
        rows.append({"task": task, "preview": parts_text(message.parts) if message else ""})
    return rows


@dataclass
class QueueItem:
    """One waiting task as the inbox shows it: what was asked, what the agent asks now, by whom."""

    task: object
    request: list[PartView]
    request_id: str
    prompt: list[PartView]
    caller: str


def queue_items(tenant, tasks) -> list[QueueItem]:
    """Inbox items for a page of waiting tasks, in three queries whatever the page size."""
    tasks = list(tasks)
    requests = first_requests(task.pk for task in tasks)
    names = principal_names(tenant, [task.owner for task in tasks])
    return [
        QueueItem(
            task=task,
            request=part_views(requests[task.pk].parts) if task.pk in requests else [],
            request_id=requests[task.pk].message_id if task.pk in requests else "",
            prompt=part_views(task.status_message.parts) if task.status_message else [],
            caller=names.get(task.owner, task.owner),
        )
        for task in tasks
    ]


def timeline(events, answered_by=()) -> list[TimelineEntry]:
    """One line per logged event: what the task's life looked like, in order.

    An answer puts the task back to SUBMITTED in the log (it waits for its next
    turn); shown as a state, the timeline would seem to start over, so it is
    shown as the answer it is, by whom (`answered_by`: who sent each message
    after the first, in order).
    """
    entries = []
    answered_by = list(answered_by)
    previous = None
    for event in events:
        payload = event.payload or {}
        entry = TimelineEntry(seq=event.seq, at=event.created_at, kind=event.get_kind_display())
        state = payload_state(payload)
        if state == TaskState.SUBMITTED and previous in INTERRUPTED_STATES:
            entry.kind = "Answer"
            by = answered_by.pop(0) if answered_by else ""
            entry.text = f"Answered by {by}; the agent resumes" if by else "Answered; the agent resumes"
            entries.append(entry)
            previous = state
            continue
        if state:
            entry.state, entry.state_label = str(state), STATE_LABELS.get(state, str(state))
            previous = state
        if "statusUpdate" in payload:
            entry.text = parts_text(payload["statusUpdate"]["status"].get("message", {}).get("parts"))
        elif "task" in payload:
            entry.text = "Task created"
        elif "artifactUpdate" in payload:
            artifact = payload["artifactUpdate"].get("artifact", {})
            name = artifact.get("name") or artifact.get("artifactId", "")
            chunk = " (chunk appended)" if payload["artifactUpdate"].get("append") else ""
            entry.text = f"Artifact {name}{chunk}"
        elif "message" in payload:
            entry.text = parts_text(payload["message"].get("parts"))
        entries.append(entry)
    return entries
