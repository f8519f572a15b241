"""Hosts a remote A2A agent behind the platform: forwards each turn, relays its events.

Config (ProxyConfig): `{"url": "http://host/a2a/t/a/", "card_url": "...",
"headers": {...}, "timeout": 300}`; only `url` is required. The remote card is
read from `card_url`, or from <url>/.well-known/agent-card.json, through the
outbound screen (agents/remote_cards.py), and so is every interface it
lists. Each turn sends the user's message to the remote agent with the
a2a-sdk client (streaming when the remote card allows it) and relays what
comes back as events of the local task: status updates with their messages,
and artifact chunks with their append/lastChunk flags.

Multi-turn: the remote task and context ids are stored in the local task's
metadata (through the metadata of a status update) as soon as the remote task
exists, so a follow-up to a local task that went input-required is forwarded
to the same remote task. Bad config and unreachable remotes end the task
FAILED with a readable status message; a new or changed config is checked
before it is stored (validate_config), with the same URL screening.
"""

import asyncio
import logging
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict
from pydantic import BaseModel, ConfigDict, Field

from agents.outbound import BAD_HEADER, HEADER_NAME_RE, UrlRefused, deadline, header_valid, time_left
from agents.registry import ConfigInvalid
from agents.remote_cards import (
    CardUnavailable,
    CredentialedClient,
    ScreenedTransport,
    card_fetch,
    card_url_of,
    origin_of,
    proxy_url_check,
)

logger = logging.getLogger(__name__)

# Where the remote ids live in the local task's metadata.
METADATA_KEY = "a2aProxy"
DEFAULT_TIMEOUT = 300.0
# The longest a remote call may be allowed to take.
LONGEST_TIMEOUT = 900
CANCEL_TIMEOUT = 5.0
# The longest reading the remote card, or connecting (its host name resolved), may take.
CONNECT_TIMEOUT = 10.0
# The health check's patience with the remote card: it runs while a page renders.
READY_TIMEOUT = 2.0
SETTLED_STATES = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}
# Errors that mean "the remote could not be used", as opposed to bugs in this module.
REMOTE_ERRORS = (A2AError, httpx.HTTPError, OSError, ValueError)


# The config schema: the console renders it as a form; every write path validates it.
class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, title="A2A proxy")

    url: str = Field(
        title="URL",
        min_length=1,
        description="The remote agent's JSON-RPC URL. Its card is read from "
        "<url>/.well-known/agent-card.json unless a card URL is given.",
        examples=["https://agents.example.com/a2a/acme/helper/"],
        json_schema_extra={"format": "uri"},
    )
    card_url: str = Field(
        "",
        title="Card URL",
        description="Where the remote agent's card is, when it is not at <url>/.well-known/agent-card.json.",
        examples=["https://agents.example.com/.well-known/agent-card.json"],
        json_schema_extra={"format": "uri"},
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP headers sent with every call to the remote agent, e.g. its API key: only to "
        "the scheme, host and port of the URL or the card URL, not to another the card names.",
        examples=[{"Authorization": "Bearer <the remote agent's token>"}],
        # Secrets: shown only to those who may edit the agent (agents.registry.config_shown).
        json_schema_extra={"writeOnly": True},
    )
    timeout: float = Field(
        DEFAULT_TIMEOUT,
        ge=1,
        le=LONGEST_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds one call to the remote agent may take.",
        examples=[60],
        json_schema_extra={"unit": "seconds"},
    )


class ProxyConfigError(Exception):
    pass


@dataclass
class RemoteTarget:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    card_url: str = ""

    @property
    def card_location(self) -> str:
        return self.card_url or card_url_of(self.url)

    @property
    def origins(self) -> frozenset[tuple[str, str, int]]:
        """Where `headers` may go: the origins of `url` and `card_url`, the URLs the admin chose."""
        return frozenset(origin_of(url) for url in (self.url, self.card_location))


def remote_target(config: dict | None, *, timeout: float = CONNECT_TIMEOUT) -> RemoteTarget:
    """The remote agent named by the agent's config; ProxyConfigError says what is wrong.

    The URLs' hosts are resolved (and screened), both within `timeout` seconds.
    """
    with deadline(timeout):
        return _remote_target(config, timeout)


def _remote_target(config: dict | None, timeout: float) -> RemoteTarget:
    config = config or {}
    url = config.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ProxyConfigError('its config has no "url" of a remote A2A agent')
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ProxyConfigError('"url" in its config must be an http(s) URL of a remote A2A agent')
    # A tenant admin chooses this URL: the same screening as webhooks keeps the
    # proxy from reaching the platform's own network (SSRF).
    try:
        proxy_url_check(url.strip(), timeout=timeout)
    except UrlRefused as exc:
        raise ProxyConfigError(f'"url" in its config is refused: {exc}') from None
    card_url = config.get("card_url") or ""
    if card_url:
        try:
            proxy_url_check(str(card_url).strip(), timeout=timeout)
        except UrlRefused as exc:
            raise ProxyConfigError(f'"card_url" in its config is refused: {exc}') from None
    headers = config.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ProxyConfigError('"headers" in its config must map header names to strings')
    try:
        timeout = float(config.get("timeout", DEFAULT_TIMEOUT))
    except (TypeError, ValueError):
        raise ProxyConfigError('"timeout" in its config must be a number of seconds') from None
    return RemoteTarget(
        url=url.strip(), headers=dict(headers), timeout=max(timeout, 1.0), card_url=str(card_url).strip()
    )


@asynccontextmanager
async def remote_client(target: RemoteTarget, timeout: float):
    """An a2a-sdk client for the remote agent, built from its agent card."""
    # The card is read through the outbound screen, which checks every interface it lists.
    try:
        remote = await asyncio.to_thread(
            card_fetch, target.card_location, headers=target.headers, timeout=min(timeout, CONNECT_TIMEOUT)
        )
    except CardUnavailable as exc:
        raise ValueError(str(exc)) from None
    # Our own httpx client: each call screened and pinned to the address it was checked at, the
    # configured headers only on calls to the origins of the configured URLs (the card's
    # interface URLs are the remote's to say).
    async with CredentialedClient(
        credentials=target.headers,
        origins=target.origins,
        timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
        trust_env=False,
        transport=ScreenedTransport(),
    ) as http:
        client = await create_client(
            remote.card, client_config=ClientConfig(streaming=True, httpx_client=http)
        )
        try:
            yield client
        finally:
            await client.close()


def remembered_remote(task: Task | None) -> dict:
    if task is None or not task.HasField("metadata"):
        return {}
    value = MessageToDict(task.metadata).get(METADATA_KEY)
    return value if isinstance(value, dict) else {}


class A2AProxyAgentExecutor(AgentExecutor):
    title = "A2A proxy"
    description = (
        "Hosts a remote A2A agent behind the platform: forwards every request to it with the "
        "a2a-sdk client and relays its answers, under this tenant's credentials."
    )
    config_model = ProxyConfig
    default_skills = [
        {
            "id": "a2a_proxy",
            "name": "A2A proxy",
            "description": (
                "Hosts a remote A2A agent (its URL is in this agent's config) behind the "
                "platform: messages, status updates, artifacts and follow-ups pass through."
            ),
            "tags": ["proxy", "a2a"],
            "examples": ["hello"],
        }
    ]

    @staticmethod
    def validate_config(config: dict) -> None:
        """What the schema cannot say, checked once it passed: the URLs are http(s) and may be
        called (this resolves their hosts), and header values do not break a request."""
        try:
            target = remote_target(config)
        except ProxyConfigError as exc:
            # remote_target() words it for a status message about "this proxy agent".
            message = str(exc).replace("its config", "the config")
            key = "card_url" if message.startswith('"card_url"') else "url"
            raise ConfigInvalid(f"{message[:1].upper()}{message[1:]}.", key=key) from None
        except ValueError as exc:  # urlsplit() refuses some URLs outright
            raise ConfigInvalid(f'"url" in the config is not a valid URL: {exc}.', key="url") from None
        for name, value in target.headers.items():
            if not header_valid(name, value):
                # Named, never quoted: the value is likely a secret.
                shown = repr(name) if HEADER_NAME_RE.fullmatch(name) else "one of them"
                raise ConfigInvalid(
                    f'"headers" in the config has a header that is not valid HTTP: {shown} (printable '
                    "ASCII, with no space or tab at either end of the value).",
                    key="headers",
                )

    @staticmethod
    def check_ready(config: dict) -> None:
        """The remote agent answers with a usable card, within READY_TIMEOUT seconds."""
        with deadline(READY_TIMEOUT):  # its lookups and the card's fetch together
            try:
                target = remote_target(config, timeout=READY_TIMEOUT)
            except ProxyConfigError as exc:
                raise ConfigInvalid(f"{exc}.") from None
            try:
                card_fetch(target.card_location, headers=target.headers, timeout=time_left(READY_TIMEOUT))
            except CardUnavailable as exc:
                raise ConfigInvalid(f"the remote agent is unreachable: {exc}") from None

    def __init__(self, config: dict | None = None):
        self.config = config or {}
        # Known as soon as the remote task exists; cancel() uses it.
        self.remote_task_id = ""
        self.remote_context_id = ""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        try:
            # Resolving the URLs' hosts blocks: not on the event loop, which other turns share.
            target = await asyncio.to_thread(remote_target, self.config)
        except ProxyConfigError as exc:
            await updater.failed(new_text_message(f"This proxy agent is not set up correctly: {exc}."))
            return
        remembered = remembered_remote(task)
        self.remote_task_id = remembered.get("remoteTaskId", "")
        self.remote_context_id = remembered.get("remoteContextId", "")
        relay = _Relay(self, updater, event_queue)
        try:
            async with remote_client(target, target.timeout) as client:
                request = SendMessageRequest(message=self._outgoing(context.message))
                async for event in client.send_message(request):
                    await relay.event(event)
                    if relay.settled:
                        break
                if not relay.settled and self.remote_task_id:
                    # The stream ended early (a dropped connection, a non-streaming remote):
                    # the remote task itself says where it is.
                    await relay.task(await client.get_task(GetTaskRequest(id=self.remote_task_id)))
        except REMOTE_ERRORS as exc:
            logger.warning(
                "a2a_proxy task %s: remote agent %s failed: %s", task.id, target.url, _describe(exc)
            )
            if not relay.settled:
                await updater.failed(
                    new_text_message(f"The remote agent could not be used: {_describe(exc)}")
                )
            return
        if not relay.settled:
            await updater.failed(
                new_text_message("The remote agent stopped answering before its task reached a final state.")
            )

    def _outgoing(self, message: Message | None) -> Message:
        """The user's message as the remote agent gets it: a fresh id, the remote task's ids."""
        outgoing = Message(
            role=Role.ROLE_USER,
            # Our ids mean nothing to the remote (and may already be taken there).
            message_id=str(uuid.uuid4()),
            task_id=self.remote_task_id,
            context_id=self.remote_context_id,
        )
        if message is not None:
            outgoing.parts.extend(message.parts)
            outgoing.extensions.extend(message.extensions)
            if message.HasField("metadata"):
                outgoing.metadata.CopyFrom(message.metadata)
        return outgoing

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the remote task too: during a turn, or (on a fresh executor) after one.

        The platform also calls this for a task canceled while it waited for
        input, so the remote task does not wait forever; its id then comes from
        the local task's metadata.
        """
        task = context.current_task
        remote_task_id = self.remote_task_id or remembered_remote(task).get("remoteTaskId")
        if remote_task_id:
            # Best effort: the local task is canceled whatever the remote says.
            try:
                async with asyncio.timeout(CANCEL_TIMEOUT):  # the lookups included
                    target = await asyncio.to_thread(remote_target, self.config, timeout=CANCEL_TIMEOUT)
                    async with remote_client(target, CANCEL_TIMEOUT) as client:
                        await client.cancel_task(CancelTaskRequest(id=remote_task_id))
            except Exception as exc:
                logger.warning(
                    "a2a_proxy task %s: could not cancel remote task %s: %r",
                    task.id if task else "?",
                    remote_task_id,
                    exc,
                )
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


class _Relay:
    """Turns the remote task's events into events of the local task."""

    def __init__(self, executor: A2AProxyAgentExecutor, updater: TaskUpdater, event_queue: EventQueue):
        self.executor = executor
        self.updater = updater
        self.event_queue = event_queue
        self.settled = False

    async def event(self, event: StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        if kind == "task":
            await self.task(event.task)
        elif kind == "status_update":
            await self.status(event.status_update.status)
        elif kind == "artifact_update":
            await self.artifact(event.artifact_update)
        elif kind == "message":
            # A direct reply ends the exchange; it is the local task's final word.
            await self.updater.complete(self._local_message(event.message))
            self.settled = True

    async def task(self, remote: Task) -> None:
        if remote.id and remote.id != self.executor.remote_task_id:
            self.executor.remote_task_id = remote.id
            self.executor.remote_context_id = remote.context_id
            # The platform merges a status update's metadata into the task: this is
            # how the next turn finds the remote task again.
            await self.updater.update_status(
                TaskState.TASK_STATE_WORKING,
                new_text_message("Forwarded to the remote agent."),
                metadata={METADATA_KEY: {"remoteTaskId": remote.id, "remoteContextId": remote.context_id}},
            )
        if remote.status.state in SETTLED_STATES:
            # A whole task at once (non-streaming remote, or one already done):
            # its artifacts are the result. Earlier ones are only replaced, never doubled.
            for artifact in remote.artifacts:
                await self.event_queue.enqueue_event(
                    TaskArtifactUpdateEvent(
                        task_id=self.updater.task_id, context_id=self.updater.context_id, artifact=artifact
                    )
                )
            await self.status(remote.status)

    async def status(self, status: TaskStatus) -> None:
        if status.state == TaskState.TASK_STATE_UNSPECIFIED:
            return
        message = self._local_message(status.message) if status.HasField("message") else None
        await self.updater.update_status(status.state, message)
        self.settled = status.state in SETTLED_STATES

    async def artifact(self, update: TaskArtifactUpdateEvent) -> None:
        local = TaskArtifactUpdateEvent(
            task_id=self.updater.task_id,
            context_id=self.updater.context_id,
            artifact=update.artifact,
            append=update.append,
            last_chunk=update.last_chunk,
        )
        if update.HasField("metadata"):
            local.metadata.CopyFrom(update.metadata)
        await self.event_queue.enqueue_event(local)

    def _local_message(self, remote: Message) -> Message:
        local = Message(
            role=Role.ROLE_AGENT,
            message_id=str(uuid.uuid4()),
            task_id=self.updater.task_id,
            context_id=self.updater.context_id,
        )
        local.parts.extend(remote.parts)
        if remote.HasField("metadata"):
            local.metadata.CopyFrom(remote.metadata)
        return local


def _describe(exc: BaseException) -> str:
    """A one-line reason for a status message; the root cause says more than the wrapper.

    Never the text of a header httpx refused: it quotes the value (a secret of the config),
    and the SDK's wrapper quotes httpx.
    """
    link: BaseException | None = exc
    while link is not None:
        if isinstance(link, httpx.LocalProtocolError):
            return BAD_HEADER
        link = link.__cause__
    cause = exc
    while cause.__cause__ is not None and str(cause.__cause__):
        cause = cause.__cause__
    text = str(cause) or cause.__class__.__name__
    return text if cause is exc else f"{exc.__class__.__name__}: {text}"
