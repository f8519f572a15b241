"""A long-running agent: streams progress and an artifact in chunks, then completes.

Over about `duration` seconds (config key, default 3.0, capped) it sends a
WORKING status update per step and one artifact chunk per step: the first
chunk starts the artifact, later ones carry `append`, the last `lastChunk`.
It only awaits asyncio.sleep between steps, so a cancel stops it at once.
A new or changed config must fit ProgressConfig: a `duration` from 0 to
MAX_DURATION, if any, and no other keys.
"""

import asyncio
import math

from a2a.helpers import new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import TaskState
from pydantic import BaseModel, ConfigDict, Field

from agents.builtin.history import message_text

DEFAULT_DURATION = 3.0
# A demo agent should never hold a worker for long, whatever its config says.
MAX_DURATION = 60.0
STEPS = 4


class ProgressConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, title="Long-running job")

    duration: float = Field(
        DEFAULT_DURATION,
        ge=0,
        le=MAX_DURATION,
        allow_inf_nan=False,
        description=f"Seconds the job takes, spread over its {STEPS} steps.",
        examples=[3, 10],
        json_schema_extra={"unit": "seconds"},
    )


def configured_duration(config: dict | None) -> float:
    """The `duration` config value in seconds, falling back to the default when unusable."""
    try:
        duration = float((config or {}).get("duration", DEFAULT_DURATION))
    except (TypeError, ValueError):
        return DEFAULT_DURATION
    if not math.isfinite(duration):
        return DEFAULT_DURATION
    return min(max(duration, 0.0), MAX_DURATION)


class ProgressAgentExecutor(AgentExecutor):
    title = "Long-running job (streaming)"
    description = (
        "A long-running job that reports progress and streams its result in chunks; "
        "it can be canceled while it runs."
    )
    config_model = ProgressConfig
    answers_with_task = True
    default_skills = [
        {
            "id": "progress",
            "name": "Long-running job",
            "description": (
                "Works for a few seconds, sending progress updates and an artifact in "
                "several chunks; can be canceled while it runs."
            ),
            "tags": ["streaming", "long-running", "artifact chunks"],
            "examples": ["Crunch the numbers"],
        }
    ]

    def __init__(self, config: dict | None = None):
        self.duration = configured_duration(config)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        request = message_text(context.message) or "your job"
        # One artifact id for every chunk, so clients can put the pieces together.
        artifact_id = f"progress-{task.id}"
        await updater.start_work(new_text_message(f'Starting "{request}" ({STEPS} steps)...'))
        for step in range(1, STEPS + 1):
            await asyncio.sleep(self.duration / STEPS)
            percent = step * 100 // STEPS
            await updater.start_work(new_text_message(f"Step {step} of {STEPS} done ({percent}%)"))
            await updater.add_artifact(
                [new_text_part(f"Result part {step} of {STEPS} for: {request}\n", media_type="text/plain")],
                artifact_id=artifact_id,
                name="progress-result",
                append=step > 1,
                last_chunk=step == STEPS,
            )
        await updater.complete(new_text_message(f"Finished all {STEPS} steps."))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).update_status(TaskState.TASK_STATE_CANCELED)
