"""Approvals: who may let an auth-required task go on, and how a handler learns of a decision.

The platform decides who approved, never the agent's reading of a message: a
message that says "approve" proves nothing about who sent it. When a principal
other than the task's requester, holding the right to approve, answers an
auth-required task, the platform stores its decision with that message and
hands it to the turn's handler as

    context.call_context.state[AUTHORIZATION_KEY] == {
        "decision": "granted" | "denied", "by": "<name>", "principal": "<principal>"}

Nothing a caller sends reaches that key: it is built from a column the
platform alone writes, never from a message's parts or metadata. Handlers that
need an approval read it with `authorization_of(context)` and treat anything
else, whatever its text says, as no decision.
"""

import re

from a2a.helpers import get_data_parts, get_message_text
from a2a.server.agent_execution import RequestContext
from a2a.types import Message

AUTHORIZATION_KEY = "authorization"
# The OAuth2 scope that makes a client (or a person's token) an approver of its tenant's tasks.
APPROVE_SCOPE = "a2a:approve"
# Who may decide, as a status message tells the requester.
APPROVERS = (
    "Only someone other than the requester can decide: an operator of the tenant "
    "(console, or the management API's grant and deny), or a client whose token "
    f"has the '{APPROVE_SCOPE}' scope."
)
GRANTED, DENIED = "granted", "denied"
GRANT_WORDS = {"approve", "approved", "yes", "grant", "granted", "allow", "allowed"}
DENY_WORDS = {"deny", "denied", "no", "reject", "rejected", "decline", "declined"}
# Words and marks that may stand around a decision without changing it: "I approve this",
# "Yes, please.", "OK, approved". A question mark is no such mark: "approve?" asks.
FILLER_WORDS = {"i", "we", "please", "it", "this", "that", "the", "request", "is", "ok", "okay"}
FILLER_MARKS = set(".,!:;-'\"")


def requested_decision(message: Message | None) -> str | None:
    """ "granted", "denied" or None: what one message asks for, whoever sent it.

    A structured answer (a data part `{"authorization": "granted" | "denied"}`)
    wins over the text around it. Otherwise the text decides only when it is a
    decision and nothing more: every word a grant word, or every word a denial
    word, give or take FILLER_WORDS ("Yes, approved.", "No. Denied."). Anything
    more is no decision: "Do not approve this", "why would I approve?", "yes,
    but first tell me what it deploys", "no, approve", "approve ❌", a word in
    another language. A refusal is never read as a grant. Whether the decision
    counts is the platform's call (see the module docstring).
    """
    if message is None:
        return None
    for data in get_data_parts(message.parts):
        if isinstance(data, dict) and data.get(AUTHORIZATION_KEY) in (GRANTED, DENIED):
            return data[AUTHORIZATION_KEY]
    # Every word in any script, and every other mark (an emoji, "?"), is a token: "нет, approve"
    # and "approve ❌" hold more than a decision.
    tokens = re.findall(r"\w+|[^\w\s]", get_message_text(message).lower())
    words = [token for token in tokens if token not in FILLER_WORDS and token not in FILLER_MARKS]
    if words and all(word in GRANT_WORDS for word in words):
        return GRANTED
    if words and all(word in DENY_WORDS for word in words):
        return DENIED
    return None


def authorization_of(context: RequestContext) -> dict | None:
    """The approver's decision that started this turn, as the platform recorded it; None if none."""
    record = context.call_context.state.get(AUTHORIZATION_KEY) if context.call_context else None
    if isinstance(record, dict) and record.get("decision") in (GRANTED, DENIED):
        return record
    return None
