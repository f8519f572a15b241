"""Durable A2A state: contexts, tasks, messages, artifacts and each task's event log.

Parts, metadata and event payloads are stored in their ProtoJSON form, exactly
as they go over the wire, so reading a task back needs no translation beyond
wrapping the stored dicts.
"""

import uuid

from django.db import models

from agents.models import Agent
from tasks_app.fields import EncryptedTextField
from tenants import sql
from tenants.models import Tenant


class TaskState(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    WORKING = "working", "Working"
    INPUT_REQUIRED = "input-required", "Input required"
    AUTH_REQUIRED = "auth-required", "Auth required"
    COMPLETED = "completed", "Completed"
    CANCELED = "canceled", "Canceled"
    FAILED = "failed", "Failed"
    REJECTED = "rejected", "Rejected"


TERMINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.CANCELED, TaskState.FAILED, TaskState.REJECTED})
INTERRUPTED_STATES = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})


class Context(models.Model):
    """A conversation, scoped to the caller that started it.

    Two callers that send the same contextId get a context each: a context id
    never lets one caller join, or learn of, another caller's conversation.
    """

    # Led by the unique (tenant, owner, context_id): no index of its own to keep up on every write.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="contexts", db_index=False)
    # Server-generated contexts get a UUID; a client may also bring its own id.
    context_id = models.CharField(max_length=255)
    # The principal that started it, in Task.owner's format.
    owner = models.CharField(max_length=255, default="anonymous")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "owner", "context_id"], name="context_tenant_owner_id_unique"
            )
        ]

    def __str__(self) -> str:
        return self.context_id


class Task(models.Model):
    class Reply(models.TextChoices):
        """What a SendMessage that started the task answers with."""

        # The task itself (it was shown to the caller, or the agent made it a task).
        TASK = "task", "Task"
        # Not shown to the caller yet: an agent that answers with a Message alone
        # makes it a message exchange.
        OPEN = "open", "Task, or the agent's Message"
        # The agent answered with a Message: the row is the durable record of the
        # exchange, shown in the console, never to the A2A caller.
        MESSAGE = "message", "Message exchange"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Every index of Meta leads with tenant: no index of its own to keep up on every write.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tasks", db_index=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tasks")
    context = models.ForeignKey(Context, on_delete=models.CASCADE, related_name="tasks")
    state = models.CharField(max_length=20, choices=TaskState.choices, default=TaskState.SUBMITTED)
    status_message = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status_timestamp = models.DateTimeField()
    metadata = models.JSONField(default=dict, blank=True)
    # Who created the task: "client:<client_id>", "user:<id>" or "anonymous".
    owner = models.CharField(max_length=255, default="anonymous")
    # Sequence number of the last TaskEvent; the next event gets event_seq + 1.
    event_seq = models.PositiveIntegerField(default=0)
    # How many push configs the task has, kept by their create and delete under the task's lock: a
    # batch's locking read has it as the lock found it (a subquery there would read it as it was
    # when the statement began, missing a config stored while the batch waited for the lock).
    push_config_count = models.PositiveSmallIntegerField(default=0)
    reply = models.CharField(max_length=10, choices=Reply.choices, default=Reply.TASK)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "agent", "-status_timestamp"], name="task_agent_recent_idx"),
            models.Index(fields=["tenant", "context"], name="task_context_idx"),
            models.Index(fields=["tenant", "state", "status_timestamp"], name="task_state_idx"),
            models.Index(fields=["tenant", "-updated_at"], name="task_updated_idx"),
        ]

    def __str__(self) -> str:
        return str(self.id)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def is_interrupted(self) -> bool:
        return self.state in INTERRUPTED_STATES

    @property
    def is_message_exchange(self) -> bool:
        return self.reply == Task.Reply.MESSAGE

    def become_task(self) -> bool:
        """Make a task not shown to its caller yet (Reply.OPEN) a task for good; whether `reply` changed.

        Called for a stored word that is not a bare Message (a status, an artifact,
        a failure, a cancel): only a bare Message can make an OPEN task a message
        exchange. The row is saved by the caller; services.task_reveal does the
        same with a conditional UPDATE.
        """
        if self.reply != Task.Reply.OPEN:
            return False
        self.reply = Task.Reply.TASK
        return True


class DraftTaskAlias(models.Model):
    """The id a draft-dialect (0.1, tasks/send) client chose for a task it created.

    Written by tasks_app/protocol/legacy only (1.0 ids are always server-made);
    the console shows it and finds tasks by it (selectors.tasks_matching). Unique per
    agent and caller, so two callers (or two agents' clients) may pick the same id.
    """

    task = models.OneToOneField(Task, primary_key=True, on_delete=models.CASCADE, related_name="draft_alias")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    # The task's owner: each caller names its tasks in a space of its own, so an id
    # another caller took is no error that would tell its task exists.
    owner = models.CharField(max_length=255, default="anonymous")
    client_task_id = models.CharField(max_length=255)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "owner", "client_task_id"], name="draft_alias_owner_id_unique"
            )
        ]

    def __str__(self) -> str:
        return self.client_task_id


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", "User"
        AGENT = "agent", "Agent"

    class Turn(models.TextChoices):
        """Lifecycle of the agent turn a user message starts ('' for other messages)."""

        NONE = "", "No turn"
        PENDING = "pending", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="messages")
    # message_task_order_idx leads with task: no index of its own to keep up on every write.
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    context = models.ForeignKey(Context, on_delete=models.CASCADE, related_name="messages")
    message_id = models.CharField(max_length=255)
    role = models.CharField(max_length=10, choices=Role.choices)
    parts = models.JSONField(default=list)
    metadata = models.JSONField(default=dict, blank=True)
    extensions = models.JSONField(default=list, blank=True)
    reference_task_ids = models.JSONField(default=list, blank=True)
    turn = models.CharField(max_length=10, choices=Turn.choices, default=Turn.NONE, blank=True)
    turn_started_at = models.DateTimeField(null=True, blank=True)
    # When the turn closed (its last attempt's end), for the console's turn-duration charts.
    turn_finished_at = models.DateTimeField(null=True, blank=True)
    # The turn's lease: each claim counts an attempt and holds the turn until
    # lease_until, renewed while it runs; the sweeper runs an expired one again.
    turn_attempts = models.PositiveSmallIntegerField(default=0)
    lease_until = models.DateTimeField(null=True, blank=True)
    # When the turn was last handed to the workers, on the database's clock (the sweeper judges
    # it by that clock), and how many times the sweeper has sent it again since it was queued:
    # each copy waits twice as long as the last (sweeper.py).
    dispatched_at = sql.DatabaseClockField(null=True, blank=True)
    redispatches = models.PositiveIntegerField(default=0)
    # Who sent it, for user messages: same principal format as Task.owner.
    sender = models.CharField(max_length=255, blank=True, default="")
    # An approver's decision this message carries to the agent ({"decision", "by",
    # "principal"}), written by the platform alone (services._approval), never from the wire.
    approval = models.JSONField(null=True, blank=True)
    # For a user message: the task's metadata as its turn found it, noted by the turn's
    # first batch that changed it. A run again after a lost worker starts from it.
    turn_metadata_base = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # No uniqueness on message_id: a repeated id is an ordinary new message
        # (as in the SDK); retries are made safe by IdempotencyKey instead.
        indexes = [
            # A task's messages in their order (created_at, then id): a page of history, newest
            # first, reads only the page's rows, whatever the length of the history.
            models.Index(fields=["task", "created_at", "id"], name="message_task_order_idx"),
            models.Index(fields=["turn", "created_at"], name="message_turn_idx"),
            models.Index(
                fields=["tenant", "turn_finished_at"],
                condition=models.Q(turn_finished_at__isnull=False),
                name="message_turn_finished_idx",
            ),
            models.Index(
                fields=["turn", "lease_until"],
                condition=models.Q(turn__in=["pending", "running"]),
                name="message_open_turn_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.message_id


class IdempotencyKey(models.Model):
    """An Idempotency-Key a caller sent with SendMessage, and the task that request started.

    A draft-dialect send has none: its key is made from its whole params (protocol/legacy/draft.py).

    Unique per (caller, agent, key), so concurrent retries meet in the database:
    the second insert waits for the first transaction and then fails. A record
    older than IDEMPOTENCY_TTL is ignored, and replaced by the next use of its key.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    # The caller's principal, in Task.owner's format.
    caller = models.CharField(max_length=255)
    key = models.CharField(max_length=255)
    # SHA-256 of the request as parsed (deterministic protobuf serialization); of the key itself
    # for a draft send's key, which is made from the request.
    body_hash = models.CharField(max_length=64)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    # The task's last log entry before the message was stored (0: the request started the task),
    # so a blocking repeat waits for that message's turn, not an earlier one's late news.
    seq_before = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "caller", "key"], name="idempotency_agent_caller_key_unique"
            )
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created_idx")]

    def __str__(self) -> str:
        return self.key


class Artifact(models.Model):
    # Led by the unique (task, artifact_id).
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="artifacts", db_index=False)
    artifact_id = models.CharField(max_length=255)
    name = models.CharField(max_length=255, blank=True, default="")
    description = models.TextField(blank=True, default="")
    parts = models.JSONField(default=list)
    metadata = models.JSONField(default=dict, blank=True)
    extensions = models.JSONField(default=list, blank=True)
    # Chunked artifacts: how many chunks arrived, and whether lastChunk was seen.
    chunk_count = models.PositiveIntegerField(default=1)
    complete = models.BooleanField(default=True)
    # The turn (its user message's pk) that last wrote this artifact, and what
    # the artifact held before that turn (None: the turn created it), so a turn
    # run again after a lost worker starts from there instead of appending twice.
    turn = models.BigIntegerField(null=True, blank=True)
    turn_base = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "artifact_id"], name="artifact_task_id_unique")
        ]

    def __str__(self) -> str:
        return self.artifact_id


class TaskEvent(models.Model):
    """One entry of a task's append-only event log, replayed to late subscribers."""

    class Kind(models.TextChoices):
        TASK = "task", "Task"
        STATUS = "status", "Status update"
        ARTIFACT = "artifact", "Artifact update"
        MESSAGE = "message", "Message"

    # Led by the unique (task, seq).
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # The StreamResponse in 1.0 ProtoJSON, exactly as streamed.
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "seq"], name="taskevent_task_seq_unique")]
        ordering = ["task", "seq"]

    def __str__(self) -> str:
        return f"{self.task_id}#{self.seq} {self.kind}"


class PushConfig(models.Model):
    """A webhook a caller registered for one task (TaskPushNotificationConfig).

    token and auth_credentials are secrets: they go out only in the webhook
    request headers, never back through Get/List, and are stored encrypted
    (tasks_app/fields.py; their lengths are checked by push_config_clean).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="push_configs")
    # Led by the unique (task, config_id).
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="push_configs", db_index=False)
    # The config's public id: the caller's, or a UUID the server made up.
    config_id = models.CharField(max_length=255)
    url = models.CharField(max_length=2048)
    token = EncryptedTextField(blank=True, default="")
    auth_scheme = models.CharField(max_length=64, blank=True, default="")
    auth_credentials = EncryptedTextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "config_id"], name="pushconfig_task_id_unique")
        ]
        indexes = [models.Index(fields=["task", "created_at"], name="pushconfig_task_idx")]

    def __str__(self) -> str:
        return f"{self.task_id}/{self.config_id}"


class PushDelivery(models.Model):
    """One attempt to POST one event of a task to one push config's webhook."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RETRYING = "retrying", "Retry scheduled"
        SENDING = "sending", "Sending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed (retried)"
        GIVEN_UP = "given-up", "Given up"

    # Attempts that still block the events behind them on the same config.
    OPEN = (Status.PENDING, Status.RETRYING, Status.SENDING)

    config = models.ForeignKey(PushConfig, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(TaskEvent, on_delete=models.CASCADE, related_name="push_deliveries")
    # The event's seq, copied so the next event of a config is found on one index.
    seq = models.PositiveIntegerField()
    attempt = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # Earliest time a retry may be sent, on the database's clock; None for first attempts.
    not_before = models.DateTimeField(null=True, blank=True)
    created_at = sql.DatabaseClockField(auto_now_add=True)  # push_sweep judges it by the database's clock
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["config", "seq", "attempt"], name="pushdelivery_config_seq_attempt_unique"
            )
        ]
        indexes = [
            models.Index(
                fields=["config", "seq", "attempt"],
                condition=models.Q(status__in=["pending", "retrying", "sending"]),
                name="pushdelivery_open_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.config_id}#{self.seq} attempt {self.attempt} {self.status}"
