"""SendMessage, a turn and GetTask each cost a fixed, small number of SQL statements.

Counted with Django's query capture in this process, on the suite's database,
inside a transaction that is rolled back (so nothing is dispatched), with
savepoint statements left out: in production the same work runs in one
transaction per step (accept; claim; prepare; one per batch of events).
"""

import asyncio
import dataclasses
import uuid
from datetime import timedelta

import pytest
from a2a.server.events import EventQueue
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from django.db import OperationalError, connection, transaction
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent
from agents.registry import build_executor
from tasks_app.access import Caller, get_task_and_artifacts_for_caller
from tasks_app.events import _state_and_events_after
from tasks_app.models import Artifact, Context, Message, Task
from tasks_app.protocol.http import NoAgent, PendingCall
from tasks_app.protocol.operations import _get_task
from tasks_app.selectors import send_answer_at, task_list, task_snapshot
from tasks_app.services import message_send, task_answer
from tasks_app.turns import events_store, turn_claim
from tasks_app.turns.setup import Claim, _prepare, claim_and_prepare

# Context, task, message and the first log entry (a messageId is not looked up: repeats are new
# messages). On PostgreSQL the task, message and entry are one statement (sql.insert_all).
SEND = {"postgresql": 2, "sqlite": 4}
# With an Idempotency-Key: the key's record too (one INSERT; a retry is one SELECT after it).
SEND_WITH_KEY = {"postgresql": 3, "sqlite": 5}
# A task's first turn: its message with the task, agent, tenant and context (nothing else to read yet).
PREPARE_MAX = 1
# Lock (which also tells whether the task has push configs), lease, agent message insert,
# artifact write, the log, the task (the artifact is found in the turn's view, the new status
# message stays cached). On PostgreSQL the three inserts and the lease are one statement
# (sql.insert_all).
STORE = {"postgresql": 3, "sqlite": 6}
# A first turn's claim with its read: one statement on PostgreSQL (a data-modifying WITH), two on
# SQLite (its UPDATE ... RETURNING cannot feed a join).
CLAIM_AND_PREPARE = {"postgresql": 1, "sqlite": 2}
# A later turn of the task: its message with the task, then the task's messages and artifacts.
PREPARE_LATER_MAX = 3
# The caller's task (with its context, status message and artifacts), its history page. Through a
# binding the agent is read with the task: no statement more.
GET_MAX = 2
# A binding's GetTask: on PostgreSQL the history page comes in the same statement (a lateral join).
GET_THROUGH_A_BINDING = {"postgresql": 1, "sqlite": 2}
# A stream's or a waiting caller's look at the log: the task's state with its events after a point.
LOG_READ_MAX = 1
# The Task a SubscribeToTask (or a follow-up's stream) starts with, and its log position: the
# position, the task, its page of history, its artifacts, the position again (no batch between).
STREAM_START = 5


class Rollback(Exception):
    pass


class Collecting(EventQueue):
    def __init__(self):
        self.events = []

    async def enqueue_event(self, event) -> None:
        self.events.append(event)


def _statements(queries) -> list[str | None]:
    # A statement psycopg ran prepared may be captured without its text (None); it still counts.
    return [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in (q["sql"] or "")]


def _caller() -> Caller:
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    return Caller(tenant=agent.tenant, agent=agent, principal=f"client:counting-{uuid.uuid4()}")


def _send(caller: Caller, text: str = "count me", idempotency_key: str = "", **message_fields):
    message = pb.Message(message_id=str(uuid.uuid4()), role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    for name, value in message_fields.items():
        setattr(message, name, value)
    return message_send(caller, pb.SendMessageRequest(message=message), idempotency_key=idempotency_key)


def _first_turn(outcome) -> int:
    """The id of the user message that started the task `outcome` accepted (its first turn)."""
    return Message.objects.get(task=outcome.task, role=Message.Role.USER).pk


def _answered(caller: Caller, asked: list) -> tuple[object, str, int]:
    """A task whose first turn stored `asked` (ending input-required), and the caller's answer:
    (the accept's outcome, the task's id, the answer's message id: the second turn)."""
    outcome = _send(caller)
    task_pk = str(outcome.task.pk)
    claim = Claim()
    assert turn_claim(task_pk, _first_turn(outcome), claim.start())
    turn, _, _, view = _prepare(task_pk, _first_turn(outcome), claim)
    assert events_store(turn, asked, view) == "input-required"
    _send(caller, text="more", task_id=task_pk)
    second = Message.objects.filter(task=outcome.task, role=Message.Role.USER).latest("pk").pk
    return outcome, task_pk, second


def _stored_answer(caller: Caller, task_pk: str) -> dict:
    """The task as GetTask answers it (no historyLength), read from what is stored."""
    return task_answer(get_task_and_artifacts_for_caller(caller, task_pk))


def _add_history(caller: Caller, task, count: int) -> None:
    """`count` agent messages more in the task's history, in bulk, all with one created_at (as a batch)."""
    now = timezone.now()
    Message.objects.bulk_create(
        Message(
            tenant=caller.tenant,
            task=task,
            context=task.context,
            message_id=f"bulk-{uuid.uuid4()}",
            role=Message.Role.AGENT,
            parts=[{"text": f"message {n}"}],
            created_at=now,
        )
        for n in range(count)
    )


def _in_rollback(work):
    try:
        with transaction.atomic():
            work()
            raise Rollback()
    except Rollback:
        pass


def test_send_message_stores_a_new_task_in_a_fixed_number_of_statements(stored):
    caller = _caller()
    counts = []

    def work():
        for _ in range(3):
            with CaptureQueriesContext(connection) as queries:
                _send(caller)
            counts.append(len(_statements(queries)))

    _in_rollback(work)
    assert counts[0] == SEND[connection.vendor], counts
    assert len(set(counts)) == 1, counts


def test_send_message_with_an_idempotency_key_costs_one_statement_more(stored):
    caller = _caller()
    counts = []

    def work():
        for _ in range(3):
            with CaptureQueriesContext(connection) as queries:
                _send(caller, idempotency_key=f"count-{uuid.uuid4()}")
            counts.append(len(_statements(queries)))

    _in_rollback(work)
    assert counts[0] == SEND_WITH_KEY[connection.vendor], counts
    assert len(set(counts)) == 1, counts


def test_a_turn_reads_and_writes_in_a_fixed_number_of_statements(stored):
    caller = _caller()

    def work():
        outcome = _send(caller)
        message_pk = _first_turn(outcome)
        claim = Claim()
        assert turn_claim(outcome.task.pk, message_pk, claim.start())
        with CaptureQueriesContext(connection) as prepare:
            turn, executor, context, view = _prepare(str(outcome.task.pk), message_pk, claim)
        queue = Collecting()
        asyncio.run(build_executor(caller.agent).execute(context, queue))
        # The echo agent's three events (WORKING, the artifact, COMPLETED) are one batch.
        assert len(queue.events) == 3
        with CaptureQueriesContext(connection) as store:
            assert events_store(turn, queue.events, view) == "completed"
        assert len(_statements(prepare)) <= PREPARE_MAX, _statements(prepare)
        assert len(_statements(store)) == STORE[connection.vendor], _statements(store)
        stored_task = _stored_answer(caller, str(outcome.task.pk))
        assert stored_task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [event.seq for event in outcome.task.events.order_by("seq")] == [1, 2, 3, 4]

    _in_rollback(work)


@pytest.mark.parametrize("done", [True, False], ids=["settling batch", "batch that goes on"])
def test_a_batch_of_a_turn_another_attempt_holds_writes_nothing(stored, done):
    """The lease renewal runs in the batch's own statement: when it finds the turn taken, all is undone."""
    caller = _caller()

    def work():
        outcome = _send(caller)
        message_pk = _first_turn(outcome)
        claim = Claim()
        assert turn_claim(outcome.task.pk, message_pk, claim.start())
        turn, executor, context, view = _prepare(str(outcome.task.pk), message_pk, claim)
        queue = Collecting()
        asyncio.run(build_executor(caller.agent).execute(context, queue))
        batch = queue.events if done else queue.events[:2]  # WORKING and the artifact: not settled
        # The sweeper gave the turn to a new attempt meanwhile.
        Message.objects.filter(pk=message_pk).update(turn_attempts=turn.attempt + 1)
        before = Message.objects.values("turn", "lease_until", "turn_finished_at").get(pk=message_pk)
        assert events_store(turn, batch, view) is None
        task = Task.objects.get(pk=outcome.task.pk)
        assert (task.state, task.event_seq) == (outcome.task.state, outcome.task.event_seq)
        assert list(task.events.values_list("seq", flat=True)) == [1]
        assert not task.artifacts.exists()
        assert list(task.messages.values_list("role", flat=True)) == [Message.Role.USER]
        assert Message.objects.values("turn", "lease_until", "turn_finished_at").get(pk=message_pk) == before
        # The attempt that holds it stores the same batch.
        holder = dataclasses.replace(turn, attempt=turn.attempt + 1)
        assert events_store(holder, batch, view) == ("completed" if done else "working")
        assert Task.objects.get(pk=outcome.task.pk).event_seq == 1 + len(batch)

    _in_rollback(work)


def test_a_first_turn_is_claimed_and_read_together(stored):
    caller = _caller()

    def work():
        outcome = _send(caller)
        task_pk = str(outcome.task.pk)
        message_pk = _first_turn(outcome)
        claim = Claim()
        with CaptureQueriesContext(connection) as queries:
            turn, _, context, view = claim_and_prepare(task_pk, message_pk, claim)
        assert len(_statements(queries)) == CLAIM_AND_PREPARE[connection.vendor], _statements(queries)
        assert claim.held and turn.attempt == 1
        assert context.message.message_id == outcome.task.messages.get(pk=message_pk).message_id
        claimed = Message.objects.get(pk=message_pk)
        assert (claimed.turn, claimed.turn_attempts) == (Message.Turn.RUNNING, 1)
        assert claimed.lease_until is not None
        # Another delivery of the same turn finds it taken: nothing to run, no attempt counted.
        again = Claim()
        assert claim_and_prepare(task_pk, message_pk, again) is None
        assert not again.held
        assert Message.objects.get(pk=message_pk).turn_attempts == 1
        # A job naming another task than the message's claims nothing.
        other = _send(caller)
        other_message = _first_turn(other)
        assert claim_and_prepare(task_pk, other_message, Claim()) is None
        assert Message.objects.get(pk=other_message).turn == Message.Turn.PENDING

    _in_rollback(work)


def test_a_claim_is_held_when_the_reads_after_it_fail(stored):
    """The database fails after the claim, before the turn is set up: the retry runs it, unclaimed again."""
    caller = _caller()

    def work():
        asked = pb.TaskStatusUpdateEvent(status=pb.TaskStatus(state=pb.TASK_STATE_INPUT_REQUIRED))
        _, task_pk, second = _answered(caller, [asked])
        statements = []

        def fail_after_the_claim(execute, statement, params, many, context):
            statements.append(statement)
            if len(statements) == 2:  # a later turn reads the task's messages after its claim
                raise OperationalError("the database went away")
            return execute(statement, params, many, context)

        claim = Claim()
        with pytest.raises(OperationalError), connection.execute_wrapper(fail_after_the_claim):
            claim_and_prepare(task_pk, second, claim)
        assert claim.held
        turn, _, context, view = claim_and_prepare(task_pk, second, claim)
        assert turn.attempt == 1 and context.message.message_id == Message.objects.get(pk=second).message_id
        assert Message.objects.get(pk=second).turn_attempts == 1

    _in_rollback(work)


def test_a_later_turn_reads_what_the_earlier_ones_left(stored):
    caller = _caller()

    def work():
        asked = [
            pb.TaskArtifactUpdateEvent(artifact=pb.Artifact(artifact_id="draft", parts=[pb.Part(text="v1")])),
            pb.TaskStatusUpdateEvent(
                status=pb.TaskStatus(
                    state=pb.TASK_STATE_INPUT_REQUIRED,
                    message=pb.Message(message_id="ask", role=pb.ROLE_AGENT, parts=[pb.Part(text="more?")]),
                ),
            ),
        ]
        outcome, task_pk, second = _answered(caller, asked)
        claim = Claim()
        assert turn_claim(task_pk, second, claim.start())
        with CaptureQueriesContext(connection) as prepare:
            turn, _, context, view = _prepare(task_pk, second, claim)
        assert len(_statements(prepare)) <= PREPARE_LATER_MAX, _statements(prepare)
        assert [m.pk for m in view.messages][-1] == second and len(view.messages) == 3
        assert [a.artifact_id for a in view.artifacts] == ["draft"]
        assert "ask" in [m.message_id for m in context.current_task.history]
        assert [a.artifact_id for a in context.current_task.artifacts] == ["draft"]
        # The answer changes the artifact the first turn made: found in the view, not read again.
        changed = [
            pb.TaskArtifactUpdateEvent(
                task_id=task_pk,
                append=True,
                artifact=pb.Artifact(artifact_id="draft", parts=[pb.Part(text="v2")]),
            ),
            pb.TaskStatusUpdateEvent(task_id=task_pk, status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED)),
        ]
        assert events_store(turn, changed, view) == "completed"
        stored_task = _stored_answer(caller, task_pk)
        assert stored_task["artifacts"][0]["parts"] == [{"text": "v1"}, {"text": "v2"}]
        assert len(stored_task["artifacts"]) == 1

    _in_rollback(work)


@pytest.mark.parametrize("history", [2, 1000])
def test_get_task_costs_the_same_whatever_the_history(stored, history):
    caller = _caller()
    counts = {}

    def work():
        outcome = _send(caller)
        _add_history(caller, outcome.task, history - 1)
        with CaptureQueriesContext(connection) as queries:
            answer = _stored_answer(caller, str(outcome.task.pk))
        counts[history] = len(_statements(queries))
        # historyLength unset: a bounded page of the newest messages.
        assert len(answer["history"]) == min(history, 100)

    _in_rollback(work)
    assert counts[history] <= GET_MAX, counts


def test_list_tasks_reads_a_bounded_page_of_each_tasks_history(stored):
    # ListTasks without historyLength answers each task's newest 100 messages, as GetTask does,
    # and reads no more than that of each: a page of long conversations is no longer a page of
    # everything they ever said.
    caller = _caller()
    counts, read = {}, {}

    def work():
        short, long = _send(caller), _send(caller)
        _add_history(caller, long.task, 250)
        for history_length in (None, 120, 1, 0):
            with CaptureQueriesContext(connection) as queries:
                page = task_list(caller, history_length=history_length)
            counts[history_length] = len(_statements(queries))
            histories = {task["id"]: task.get("history", []) for task in page["tasks"]}
            read[history_length] = (len(histories[str(short.task.pk)]), len(histories[str(long.task.pk)]))
        # The newest ones, oldest first: the last bulk message (its id) ends the page.
        newest = Message.objects.filter(task=long.task).order_by("-created_at", "-pk").first()
        page = task_list(caller)
        long_history = next(t for t in page["tasks"] if t["id"] == str(long.task.pk))["history"]
        assert long_history[-1]["messageId"] == newest.message_id

    _in_rollback(work)
    assert read == {None: (1, 100), 120: (1, 120), 1: (1, 1), 0: (0, 0)}
    # Count, page, messages (none with historyLength 0): the same for every length.
    assert counts[None] == counts[120] == counts[1] == counts[0] + 1, counts


@pytest.mark.parametrize("artifacts", [0, 1, 3])
def test_get_task_reads_any_number_of_artifacts_with_the_task(stored, artifacts):
    caller = _caller()

    def work():
        outcome = _send(caller)
        start = timezone.now()
        # Created oldest first as m, z, a; stored (ids) as a, z, m; named in the order a, m, z:
        # the answer lists them oldest first, as task_snapshot does.
        names = ["m", "z", "a"][:artifacts]
        for n in reversed(range(artifacts)):
            Artifact.objects.create(
                task=outcome.task, artifact_id=names[n], parts=[{"text": f"chunk {n}"}], metadata={"n": n}
            )
            Artifact.objects.filter(task=outcome.task, artifact_id=names[n]).update(
                created_at=start + timedelta(seconds=n)
            )
        with CaptureQueriesContext(connection) as queries:
            answer = _stored_answer(caller, str(outcome.task.pk))
        assert len(_statements(queries)) <= GET_MAX, _statements(queries)
        listed = [artifact["artifactId"] for artifact in answer.get("artifacts", [])]
        assert listed == names
        assert answer == task_snapshot(outcome.task.pk)
        # Another caller of the same agent finds nothing, as before.
        with pytest.raises(TaskNotFoundError):
            _stored_answer(_caller(), str(outcome.task.pk))

    _in_rollback(work)


def test_a_look_at_the_log_is_one_statement(stored):
    caller = _caller()

    def work():
        outcome = _send(caller)
        with CaptureQueriesContext(connection) as queries:
            state, events = _state_and_events_after(outcome.task.pk, 0)
        assert len(_statements(queries)) <= LOG_READ_MAX, _statements(queries)
        assert state == outcome.task.state
        assert [seq for seq, _ in events] == [1]
        assert events[0][1]["task"]["id"] == str(outcome.task.pk)
        assert _state_and_events_after(outcome.task.pk, 1) == (outcome.task.state, [])
        assert _state_and_events_after(uuid.uuid4(), 0) == (None, [])

    _in_rollback(work)


def test_a_streams_first_task_is_read_in_a_fixed_number_of_statements(stored):
    caller = _caller()
    context = Context.objects.create(tenant=caller.tenant, context_id=f"counted-{uuid.uuid4()}")
    # Stored as the accept leaves it, without the accept's dispatch: a transaction of its own follows.
    task = Task.objects.create(
        tenant=caller.tenant,
        agent=caller.agent,
        context=context,
        owner=caller.principal,
        status_timestamp=timezone.now(),
        event_seq=1,
    )
    with CaptureQueriesContext(connection) as queries:
        seq, answer = send_answer_at(task.pk)
    assert len(_statements(queries)) == STREAM_START, _statements(queries)
    assert seq == 1 and answer["task"]["id"] == str(task.pk)


def test_get_task_through_a_binding_reads_the_agent_with_the_task(stored):
    """A binding's GetTask (a PendingCall) looks its agent up in the task's statement."""
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    anonymous = Caller(tenant=agent.tenant, agent=agent)  # what the public echo agent's callers are
    request = RequestFactory().post("/a2a/demo/echo/", content_type="application/json")

    def get(task_id: str, agent_slug: str = "echo") -> dict:
        return _binding_get(request, task_id, agent_slug)

    def work():
        outcome = _send(anonymous)
        Artifact.objects.create(task=outcome.task, artifact_id="a1", parts=[{"text": "one"}])
        with CaptureQueriesContext(connection) as queries:
            answer = get(str(outcome.task.pk))
        assert len(_statements(queries)) == GET_THROUGH_A_BINDING[connection.vendor], _statements(queries)
        assert answer == task_snapshot(outcome.task.pk)
        assert [artifact["artifactId"] for artifact in answer["artifacts"]] == ["a1"]
        # Another caller's task, an unknown one and a malformed id: not found alike.
        for task_id in (str(_send(_caller()).task.pk), str(uuid.uuid4()), "not-a-uuid"):
            with pytest.raises(TaskNotFoundError):
                get(task_id)
        # No such agent: "no agent" first, whatever the task.
        with pytest.raises(NoAgent):
            get(str(outcome.task.pk), agent_slug="no-such-agent")

    _in_rollback(work)


def _binding_get(request, task_id: str, agent_slug: str = "echo", **fields) -> dict:
    pending = PendingCall(request, "demo", agent_slug, "GetTask")
    return _get_task(pending, pb.GetTaskRequest(id=task_id, **fields))


@pytest.mark.parametrize("history_length", [None, 0, 1, 3, 100, 250])
def test_a_binding_reads_the_page_of_history_it_answers_with(stored, history_length):
    """Through a binding, the page of history read with the task is the one task_snapshot reads.

    150 messages, then an input-required status message (the newest, left out
    of the history), and two artifacts: each historyLength gives the same
    answer as task_snapshot's own read, in GET_THROUGH_A_BINDING statements
    (one where none is asked for).
    """
    agent = Agent.objects.select_related("tenant").get(tenant__slug="demo", slug="echo")
    anonymous = Caller(tenant=agent.tenant, agent=agent)
    request = RequestFactory().post("/a2a/demo/echo/", content_type="application/json")
    fields = {} if history_length is None else {"history_length": history_length}

    def work():
        outcome = _send(anonymous)
        _add_history(anonymous, outcome.task, 149)
        asking = Message.objects.create(
            tenant=anonymous.tenant,
            task=outcome.task,
            context=outcome.task.context,
            message_id="asking",
            role=Message.Role.AGENT,
            parts=[{"text": "which one?"}, {"data": {"n": 1.5, "list": [1, "two"]}}],
            metadata={"k": "v"},
            created_at=timezone.now() + timedelta(seconds=1),
        )
        type(outcome.task).objects.filter(pk=outcome.task.pk).update(status_message=asking)
        for name in ("a1", "a2"):
            Artifact.objects.create(task=outcome.task, artifact_id=name, parts=[{"text": name}])
        with CaptureQueriesContext(connection) as queries:
            answer = _binding_get(request, str(outcome.task.pk), **fields)
        # historyLength 0 reads no history anywhere.
        expected = 1 if history_length == 0 else GET_THROUGH_A_BINDING[connection.vendor]
        assert len(_statements(queries)) == expected, _statements(queries)
        assert answer == task_snapshot(outcome.task.pk, history_length=history_length)
        shown = 100 if history_length is None else min(history_length, 150)
        assert len(answer.get("history", [])) == shown
        ids = [message["messageId"] for message in answer.get("history", [])]
        assert "asking" not in ids
        assert answer["status"]["message"]["messageId"] == "asking"
        assert [artifact["artifactId"] for artifact in answer["artifacts"]] == ["a1", "a2"]

    _in_rollback(work)


def test_a_negative_history_length_is_refused_after_the_agent_is_found(stored):
    request = RequestFactory().post("/a2a/demo/echo/", content_type="application/json")
    outcome = None

    def work():
        nonlocal outcome
        outcome = _send(_caller())
        with pytest.raises(NoAgent):
            _binding_get(request, str(outcome.task.pk), agent_slug="no-such-agent", history_length=-1)
        with pytest.raises(InvalidParamsError, match="historyLength"):
            _binding_get(request, str(outcome.task.pk), history_length=-1)

    _in_rollback(work)
