"""Needs an approval before it acts: the auth-required round trip.

First turn: AUTH_REQUIRED, with a status message saying what is needed. A
later message decides: an operator's answer (a data part
`{"authorization": "granted" | "denied", "by": ...}`, as the console sends it)
or a plain reply such as "approve" / "deny". A grant completes the task with
an artifact saying what was approved and by whom; a denial ends it REJECTED;
anything else leaves it AUTH_REQUIRED and says again what is expected.
"""

import re

from a2a.helpers import get_data_parts, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, TaskState

from agents.builtin.history import earlier_user_messages, message_text
from agents.registry import AUTHORIZATION_KEY, NoConfig

GRANT_WORDS = {"approve", "approved", "yes", "grant", "granted", "allow", "allowed"}
DENY_WORDS = {"deny", "denied", "no", "reject", "rejected", "decline", "declined"}
EXPECTED = (
    'Reply "approve" to let it run or "deny" to refuse it; '
    "an operator can also grant or deny it from the console."
)


def read_decision(message: Message | None) -> tuple[str | None, str | None]:
    """("granted" | "denied" | None, who decided or None) for one user message.

    A structured answer wins over the text around it: the operator's message
    also carries the text "Authorization granted by alice".
    """
    if message is None:
        return None, None
    for data in get_data_parts(message.parts):
        if isinstance(data, dict) and data.get(AUTHORIZATION_KEY) in ("granted", "denied"):
            by = data.get("by")
            return data[AUTHORIZATION_KEY], str(by) if by else None
    words = set(re.findall(r"[a-z]+", message_text(message).lower()))
    # A reply with both kinds of word ("no, approve") is unclear, not a decision.
    granted, denied = bool(words & GRANT_WORDS), bool(words & DENY_WORDS)
    if granted != denied:
        return ("granted" if granted else "denied"), None
    return None, None


class ApprovalAgentExecutor(AgentExecutor):
    title = "Approval (auth-required)"
    description = (
        "Waits for an approval (auth-required) before it carries out a request; "
        "an operator grants or denies it in the console."
    )
    config_model = NoConfig
    default_skills = [
        {
            "id": "approval",
            "name": "Approval gate",
            "description": (
                "Asks for an authorization first; completes when it is granted and "
                "ends rejected when it is denied."
            ),
            "tags": ["auth-required", "approval", "multi-turn"],
            "examples": ["Deploy release 1.4 to production"],
        }
    ]

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        earlier = earlier_user_messages(context)
        if not earlier:
            request = message_text(context.message) or "this request"
            await updater.requires_auth(
                new_text_message(f'Approval needed to carry out "{request}". {EXPECTED}')
            )
            return
        request = message_text(earlier[0]) or "the request"
        decision, by = read_decision(context.message)
        who = f" by {by}" if by else ""
        if decision == "granted":
            await updater.add_artifact(
                [new_text_part(f'Approved{who}: "{request}" was carried out.', media_type="text/plain")],
                name="approval",
            )
            await updater.complete(new_text_message(f"Approved{who}."))
        elif decision == "denied":
            await updater.reject(new_text_message(f'Denied{who}: "{request}" was not carried out.'))
        else:
            await updater.requires_auth(
                new_text_message(f"That was neither an approval nor a denial. {EXPECTED}")
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).update_status(TaskState.TASK_STATE_CANCELED)
