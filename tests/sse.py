"""A small SSE reader for tests: each event as {"id", "event", "data"} with data decoded."""

import json
from collections.abc import Iterator

import httpx


def read_events(response: httpx.Response) -> Iterator[dict]:
    event: dict = {}
    for line in response.iter_lines():
        if not line:
            if "data" in event:
                event["data"] = json.loads(event["data"])
                yield event
            event = {}
        elif line.startswith(":"):
            event.setdefault("comments", 0)
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            event[field] = event.get(field, "") + value if field == "data" else value


def stream(url: str, body: dict | None = None, headers: dict | None = None, method: str = "POST"):
    """An open streaming request; use as a context manager."""
    sent = {"Content-Type": "application/json", "A2A-Version": "1.0", **(headers or {})}
    return httpx.stream(method, url, json=body, headers=sent, timeout=httpx.Timeout(30, read=30))
