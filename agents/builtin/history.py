"""Reading a task's conversation from the RequestContext, shared by the multi-turn built-ins.

The platform runs one turn per user message with a fresh executor, so an
executor learns where it is in the conversation from `current_task.history`
(every stored message, the one that started this turn included).
"""

from a2a.helpers import get_message_text
from a2a.server.agent_execution import RequestContext
from a2a.types import Message, Role


def earlier_user_messages(context: RequestContext) -> list[Message]:
    """The user's messages on this task before the one that started this turn, oldest first."""
    task = context.current_task
    current_id = context.message.message_id if context.message else ""
    return [
        message
        for message in (task.history if task else [])
        if message.role == Role.ROLE_USER and message.message_id != current_id
    ]


def message_text(message: Message | None) -> str:
    return get_message_text(message).strip() if message is not None else ""
