"""Needs an approval before it acts: the auth-required round trip.

First turn: AUTH_REQUIRED, with a status message saying what is needed. A
later turn decides only on the platform's record of an approver's decision
(`agents.approvals.authorization_of`): a grant completes the task with an
artifact saying what was approved and by whom, a denial ends it REJECTED.
Any other message, the requester's own "approve" included, leaves it
AUTH_REQUIRED and says who may decide.
"""

from a2a.helpers import new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import TaskState

from agents.approvals import APPROVERS, GRANTED, authorization_of, requested_decision
from agents.builtin.history import earlier_user_messages, message_text
from agents.registry import NoConfig

EXPECTED = 'An approver replies "approve" to let it run or "deny" to refuse it. ' + APPROVERS


class ApprovalAgentExecutor(AgentExecutor):
    title = "Approval (auth-required)"
    description = (
        "Waits for an approval (auth-required) before it carries out a request; "
        "an operator grants or denies it in the console."
    )
    config_model = NoConfig
    answers_with_task = True
    default_skills = [
        {
            "id": "approval",
            "name": "Approval gate",
            "description": (
                "Asks for an authorization first; completes when someone other than the "
                "requester grants it and ends rejected when it is denied."
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
        record = authorization_of(context)
        if record is None:
            if requested_decision(context.message) is not None:
                # Words alone carry no authority: the platform found no approver behind them.
                text = f"That answer does not count: it did not come from an approver. {APPROVERS}"
            else:
                text = f"That was neither an approval nor a denial. {EXPECTED}"
            await updater.requires_auth(new_text_message(text))
            return
        who = f" by {record['by']}" if record.get("by") else ""
        if record["decision"] == GRANTED:
            await updater.add_artifact(
                [new_text_part(f'Approved{who}: "{request}" was carried out.', media_type="text/plain")],
                name="approval",
            )
            await updater.complete(new_text_message(f"Approved{who}."))
        else:
            await updater.reject(new_text_message(f'Denied{who}: "{request}" was not carried out.'))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).update_status(TaskState.TASK_STATE_CANCELED)
