import uuid


def new_id() -> str:
    return f"msg-{uuid.uuid4()}"


def status_text(task: dict) -> str:
    """The text of a ProtoJSON task's current status message."""
    parts = task["status"].get("message", {}).get("parts", [])
    return "\n".join(part["text"] for part in parts if "text" in part)


def artifact_text(task: dict) -> str:
    return "\n".join(
        part["text"] for artifact in task.get("artifacts", []) for part in artifact["parts"] if "text" in part
    )
