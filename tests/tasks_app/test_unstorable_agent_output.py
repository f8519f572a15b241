"""What an agent emits that the store cannot hold fails its turn saying why, on either store.

A remote agent (the a2a_proxy) passes on whatever its peer sent: an
artifactId longer than the column, a NUL in a text or in metadata. PostgreSQL
refused it with a DataError, which ended the task FAILED with the database's
own words; SQLite stored it.
"""

import uuid

import pytest

from agents.models import Agent
from tenants.models import Tenant
from tests.conftest import user_message


@pytest.fixture(scope="module")
def unstorable(stored) -> str:
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug="unstorable",
        defaults={"name": "unstorable", "handler": "unstorable", "visibility": Agent.Visibility.PUBLIC},
    )
    return "unstorable"


@pytest.mark.parametrize(
    ("what", "reason"),
    [
        ("long-id", "The agent's artifact's artifactId is longer than 255 characters"),
        ("nul", "The agent's artifact cannot be stored: parts[0].text contains a NUL character"),
        (
            "nul-metadata",
            "The agent's status update's metadata cannot be stored: note contains a NUL character",
        ),
    ],
)
def test_an_agent_event_the_store_cannot_hold_fails_the_turn_saying_why(rpc, unstorable, what, reason):
    task = rpc("SendMessage", user_message(what, f"m-{uuid.uuid4()}"), agent=unstorable)["result"]["task"]

    assert task["status"]["state"] == "TASK_STATE_FAILED", task
    said = task["status"]["message"]["parts"][0]["text"]
    assert reason in said, said
    assert "DataError" not in said
