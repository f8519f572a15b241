"""What the fault tests share: a platform of their own, reads of what it stored, and figures.

Each test gets its own Redis, its own database in the faults session's own
PostgreSQL cluster (tests/faults/conftest.py) and its own web, worker and beat
processes, so it can kill and restart any of them without touching anything
else on the machine. The store is read with plain SQL: the tests import no
application code.
"""

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg

from tests.live import (
    ROOT,
    Platform,
    PostgresCluster,
    Process,
    RedisServer,
    child_env,
    kill_hard,
    start_beat,
    start_celery_worker,
    start_web,
    stop_processes,
)
from tests.sse import read_events

FIGURES = ROOT / "test-artifacts" / "faults.jsonl"
JSON_HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0"}
TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})
FINAL_STATES = frozenset({f"TASK_STATE_{s.upper()}" for s in TERMINAL})
INTERNAL_ERROR = -32603
# The progress agents the faults session registers (conftest.py), with their durations.
PROGRESS_STEPS = 4


# --- The platform under test ---------------------------------------------------------
@dataclass
class Stack:
    """Redis, a database and the platform's processes of one test; stop() ends them all."""

    cluster: PostgresCluster
    database: str
    redis: RedisServer
    log_dir: Path
    # Extra environment for every process started from now on (lease, retry settings).
    env: dict = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)

    def __post_init__(self):
        self.store = Store(self.cluster.url(self.database))
        self.killed: set[int] = set()

    def extra_env(self) -> dict:
        return {"REDIS_URL": self.redis.url, **self.env}

    def start_web(self, name: str = "web") -> Platform:
        platform = start_web(self.settings(), self.log_dir, name=name, extra_env=self.extra_env())
        self.processes += platform.processes
        return platform

    def start_worker(self, name: str = "worker", env: dict | None = None, threads: int = 8) -> Process:
        """A Celery worker of `threads` threads; `env`: extra environment for this one only."""
        extra = {**self.extra_env(), **(env or {})}
        process = start_celery_worker(name, child_env(self.settings(), extra), self.log_dir, threads)
        self.processes.append(process)
        return process

    def start_beat(self, name: str = "beat") -> Process:
        process = start_beat(name, child_env(self.settings(), self.extra_env()), self.log_dir, self.log_dir)
        self.processes.append(process)
        return process

    def settings(self) -> dict:
        return self.cluster.settings(self.database)

    def kill(self, process: Process) -> float:
        """kill -9 one of this test's processes; returns when it is gone (time.time())."""
        self.killed.add(process.popen.pid)
        kill_hard(process)
        return time.time()

    def exited(self) -> list[str]:
        """The processes that ended although the test did not kill them."""
        return [
            p.name for p in self.processes if p.popen.poll() is not None and p.popen.pid not in self.killed
        ]

    def stop(self) -> None:
        stop_processes(self.processes)


# --- Reading the store -------------------------------------------------------------------
@dataclass
class Event:
    seq: int
    payload: dict
    created_at: float  # epoch seconds, comparable with time.time()


class Store:
    """What the platform committed, read with SQL on a fresh connection each time.

    A fresh connection survives the database restart of the PostgreSQL test; a
    read during an outage waits for the database to come back (boundedly).
    """

    def __init__(self, url: str):
        self.url = url

    def rows(self, sql: str, params: tuple = (), retry_for: float = 60.0) -> list[tuple]:
        deadline = time.monotonic() + retry_for
        while True:
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=3) as connection:
                    return connection.execute(sql, params).fetchall()
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def tasks_of_messages(self, message_ids) -> dict[str, str]:
        """message id -> id of the task that message was stored on (absent: nothing stored)."""
        rows = self.rows(
            "SELECT message_id, task_id::text FROM tasks_app_message"
            " WHERE message_id = ANY(%s) AND task_id IS NOT NULL",
            (list(message_ids),),
        )
        return dict(rows)

    def states(self, task_ids) -> dict[str, str]:
        rows = self.rows(
            "SELECT id::text, state FROM tasks_app_task WHERE id = ANY(%s::uuid[])", (list(task_ids),)
        )
        return dict(rows)

    def event_seqs(self, task_ids) -> dict[str, int]:
        rows = self.rows(
            "SELECT id::text, event_seq FROM tasks_app_task WHERE id = ANY(%s::uuid[])", (list(task_ids),)
        )
        return dict(rows)

    def logs(self, task_ids) -> dict[str, list[Event]]:
        """Each task's event log in seq order."""
        logs: dict[str, list[Event]] = {task_id: [] for task_id in task_ids}
        rows = self.rows(
            "SELECT task_id::text, seq, payload, created_at FROM tasks_app_taskevent"
            " WHERE task_id = ANY(%s::uuid[]) ORDER BY task_id, seq",
            (list(task_ids),),
        )
        for task_id, seq, payload, created_at in rows:
            logs[task_id].append(Event(seq, payload, created_at.timestamp()))
        return logs


def wait_for(check, timeout: float, interval: float = 0.2, stop_if=None) -> bool:
    """Poll check() until it is true (True), the timeout passes or stop_if() is true (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() > deadline or (stop_if is not None and stop_if()):
            return False
        time.sleep(interval)


# --- Talking to the platform ---------------------------------------------------------------
@dataclass
class Answer:
    """One HTTP answer (status None: the request got none), its JSON body if any."""

    status: int | None
    body: dict | None = None
    transport_error: str = ""

    @property
    def error(self) -> dict | None:
        return (self.body or {}).get("error") if isinstance((self.body or {}).get("error"), dict) else None

    @property
    def task(self) -> dict | None:
        body = self.body or {}
        return (body.get("result") or {}).get("task") or body.get("task")


def post_json(url: str, body: dict, timeout: float = 45.0) -> Answer:
    try:
        response = httpx.post(url, json=body, headers=JSON_HEADERS, timeout=timeout)
    except httpx.HTTPError as exc:
        return Answer(None, transport_error=f"{type(exc).__name__}: {exc}")
    try:
        return Answer(response.status_code, response.json())
    except ValueError:
        return Answer(response.status_code, transport_error=response.text[:200])


def rpc(url: str, method: str, params: dict, timeout: float = 45.0) -> Answer:
    return post_json(
        url, {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}, timeout
    )


def send_params(
    text: str, message_id: str, *, return_immediately: bool = False, push: dict | None = None
) -> dict:
    configuration: dict = {"returnImmediately": return_immediately}
    if push:
        configuration["taskPushNotificationConfig"] = push
    message = {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]}
    return {"message": message, "configuration": configuration}


def get_task(url: str, task_id: str) -> dict:
    answer = rpc(url, "GetTask", {"id": task_id}, timeout=30)
    assert answer.body and "result" in answer.body, f"GetTask {task_id}: {answer}"
    return answer.body["result"]


@dataclass
class StreamRun:
    """One SendStreamingMessage or SubscribeToTask as the client saw it."""

    message_id: str = ""
    status: int | None = None
    events: list[dict] = field(default_factory=list)  # {"id": int, "data": the JSON-RPC response}
    error: dict | None = None  # a JSON-RPC error, in the body or in the stream
    transport_error: str = ""
    first_event_at: float | None = None

    def ids(self) -> list[int]:
        return [event["id"] for event in self.events]


def open_stream(
    url: str, body: dict, run: StreamRun, headers: dict | None = None, *, limit: float = 60.0, stop_after=None
):
    """Read one SSE stream into run until it ends, breaks, idles 20 s or runs `limit` seconds.

    stop_after(run) -> bool is asked after each event; true leaves the stream open
    and returns its (still open) response so the caller can break the server under it.
    """
    started = time.monotonic()
    sent = {**JSON_HEADERS, **(headers or {})}
    try:
        with httpx.stream(
            "POST", url, json=body, headers=sent, timeout=httpx.Timeout(30, read=20)
        ) as response:
            run.status = response.status_code
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                response.read()
                try:
                    run.error = response.json().get("error")
                except ValueError:
                    run.transport_error = response.text[:200]
                return
            for event in read_events(response):
                data = event["data"]
                if "error" in data:
                    run.error = data["error"]
                    return
                run.first_event_at = run.first_event_at or time.time()
                run.events.append({"id": int(event["id"]), "data": data})
                if stop_after is not None and stop_after(run):
                    stop_after = None
                    yield response
                if time.monotonic() - started > limit:
                    run.transport_error = f"still open after {limit:g} s"
                    return
    except httpx.HTTPError as exc:
        run.transport_error = f"{type(exc).__name__}: {exc}"


def stream_all(
    url: str, body: dict, run: StreamRun, headers: dict | None = None, limit: float = 60.0
) -> StreamRun:
    for _ in open_stream(url, body, run, headers, limit=limit):
        pass
    return run


# --- What a client sees ------------------------------------------------------------------
def payload_state(payload: dict) -> str | None:
    if "statusUpdate" in payload:
        return payload["statusUpdate"]["status"]["state"]
    if "task" in payload:
        return payload["task"]["status"]["state"]
    return None


def payload_text(payload: dict) -> str:
    message = (payload.get("statusUpdate") or {}).get("status", {}).get("message") or {}
    return " ".join(part.get("text", "") for part in message.get("parts", []))


def log_holes(log: list[Event], event_seq: int) -> int:
    """Sequence numbers missing from 1..event_seq, plus any seq stored twice."""
    seqs = [event.seq for event in log]
    top = max([event_seq, *seqs])
    return len(set(range(1, top + 1)) - set(seqs)) + len(seqs) - len(set(seqs))


def stream_faults(run: StreamRun, log: list[Event]) -> dict:
    """How a stream differs from the stored log: events missing, repeated, altered; did it end?"""
    stored = {event.seq: event.payload for event in log}
    ids = run.ids()
    altered = sum(1 for event in run.events if stored.get(event["id"]) != event["data"]["result"])
    last = run.events[-1]["data"]["result"] if run.events else {}
    return {
        "missing": len(set(stored) - set(ids)),
        "duplicated": len(ids) - len(set(ids)),
        "altered": altered,
        "out_of_order": int(ids != sorted(ids)),
        "ended_final": "statusUpdate" in last and payload_state(last) in FINAL_STATES,
    }


def client_duplicates(task: dict) -> int:
    """Artifact chunks and messages a GetTask answer holds more than once.

    A progress turn's messages and chunks are all different, so any repeat is a
    leftover of a lost attempt; the engine's "restarted" status notes are exempt.
    """
    duplicated = 0
    artifact_ids = [artifact["artifactId"] for artifact in task.get("artifacts", [])]
    duplicated += len(artifact_ids) - len(set(artifact_ids))
    for artifact in task.get("artifacts", []):
        texts = [json.dumps(part, sort_keys=True) for part in artifact.get("parts", [])]
        duplicated += len(texts) - len(set(texts))
    history = task.get("history", [])
    message_ids = [message["messageId"] for message in history]
    duplicated += len(message_ids) - len(set(message_ids))
    contents = [
        (message["role"], json.dumps(message.get("parts"), sort_keys=True))
        for message in history
        if "restarted" not in json.dumps(message.get("parts")).lower()
    ]
    return duplicated + len(contents) - len(set(contents))


def expected_chunks(text: str) -> list[str]:
    return [f"Result part {step} of {PROGRESS_STEPS} for: {text}\n" for step in range(1, PROGRESS_STEPS + 1)]


def artifact_texts(task: dict) -> list[str]:
    return [
        part.get("text", "") for artifact in task.get("artifacts", []) for part in artifact.get("parts", [])
    ]


# --- Load for the outage tests --------------------------------------------------------------
@dataclass
class Call:
    kind: str  # "blocking", "stream" or "rest"
    message_id: str
    started: float
    answer: Answer | None = None
    stream: StreamRun | None = None
    finished: float | None = None

    def outcome(self) -> str:
        """accepted, clear-error, internal-error or no-answer, as the client saw it."""
        if self.stream is not None:
            run = self.stream
            # HTTP 503 first, as for the other calls: a store outage's refusal (StoreUnavailable)
            # is JSON-RPC -32603 by design, and only its status tells it from an internal error.
            if run.status == 503:
                return "clear-error"
            if run.error is not None:
                return "internal-error" if run.error.get("code") == INTERNAL_ERROR else "clear-error"
            if run.status is not None and run.status >= 500:
                return "internal-error"
            return "accepted" if run.events else "no-answer"
        answer = self.answer
        if answer is None or answer.status is None:
            return "no-answer"
        if answer.status == 503:
            return "clear-error"
        if answer.status >= 500:
            return "internal-error"
        if answer.error is not None:
            return "internal-error" if answer.error.get("code") == INTERNAL_ERROR else "clear-error"
        if answer.status >= 400:
            return "clear-error"
        return "accepted" if answer.task else "internal-error"

    def error_text(self) -> str:
        error = (self.stream.error if self.stream else None) or (self.answer.error if self.answer else None)
        return json.dumps(error or {})


class Load:
    """Client threads that keep sending work to one agent until stop(): blocking JSON-RPC
    SendMessage, SendStreamingMessage over SSE and the REST binding's message:send."""

    def __init__(self, platform: Platform, agent: str, blocking: int = 3, streaming: int = 2, rest: int = 1):
        self.url = platform.agent_url(agent)
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        kinds = ["blocking"] * blocking + ["stream"] * streaming + ["rest"] * rest
        self.threads = [threading.Thread(target=self.run, args=(kind,), daemon=True) for kind in kinds]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self, timeout: float = 50.0) -> None:
        """Stop sending; wait (boundedly) for the calls in flight to end."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))

    def run(self, kind: str) -> None:
        while not self.stopping.is_set():
            self.call(kind)
            self.stopping.wait(0.2)

    def call(self, kind: str) -> Call:
        """One call of `kind`, counted with the load's calls."""
        call = Call(kind, f"fault-{kind}-{uuid.uuid4()}", time.time())
        with self.lock:
            self.calls.append(call)
        params = send_params(f"load {call.message_id[-6:]}", call.message_id)
        if kind == "stream":
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
            call.stream = stream_all(self.url, body, StreamRun(call.message_id), limit=40)
        elif kind == "rest":
            call.answer = post_json(self.url + "rest/message:send", params)
        else:
            call.answer = rpc(self.url, "SendMessage", params)
        call.finished = time.time()
        return call

    def probe(self) -> list[Call]:
        """One call of each kind at once, besides the load's own; returns when all are answered."""
        probes: list[Call] = []
        threads = [
            threading.Thread(target=lambda kind=kind: probes.append(self.call(kind)), daemon=True)
            for kind in ("blocking", "stream", "rest")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        return probes


def outage_figures(
    stack: Stack, load: Load, down_at: float, restored_at: float, settle: float = 60.0
) -> dict:
    """Wait for the work accepted during the load to settle, then count what went wrong.

    Every call must have got a clear error (HTTP 503, or a JSON-RPC error other
    than -32603) with nothing stored, or a task that completes; a stream that
    was accepted must carry the task's whole log, each event once, ending in its
    final state. settle bounds the wait; a dead worker ends it early.
    """
    with load.lock:
        calls = list(load.calls)
    stored = stack.store.tasks_of_messages(call.message_id for call in calls)
    task_ids = set(stored.values())
    workers = [p for p in stack.processes if p.name.startswith("worker")]
    wait_for(
        lambda: all(state in TERMINAL for state in stack.store.states(task_ids).values()),
        settle,
        interval=0.5,
        stop_if=lambda: all(w.popen.poll() is not None for w in workers),
    )
    states = stack.store.states(task_ids)
    logs = stack.store.logs(task_ids)
    outcomes = [call.outcome() for call in calls]
    figures = {
        "submitted": len(calls),
        # Calls open at some point while the service was down: the outage really was hit.
        "in_flight_during_outage": sum(
            1 for call in calls if call.started < restored_at and (call.finished or time.time()) > down_at
        ),
        "accepted": outcomes.count("accepted"),
        "clear_errors": outcomes.count("clear-error"),
        "internal_errors": outcomes.count("internal-error"),
        "unanswered": outcomes.count("no-answer"),
        "completed": sum(1 for state in states.values() if state == "completed"),
        "failed": 0,
        "lost": 0,
        "duplicated": 0,
        "broken_streams": 0,
        "error_but_stored": 0,
        "gaps": 0,
    }
    for call, outcome in zip(calls, outcomes, strict=True):
        task_id = stored.get(call.message_id)
        if outcome in ("clear-error", "internal-error"):
            # A refused request must leave nothing behind: a retry would run the work twice.
            figures["error_but_stored"] += task_id is not None
            figures["failed"] += outcome == "internal-error"
            continue
        if task_id is None or states.get(task_id) not in TERMINAL:
            figures["lost"] += 1
            continue
        figures["failed"] += states[task_id] != "completed"
        if call.stream is not None:
            faults = stream_faults(call.stream, logs[task_id])
            figures["duplicated"] += faults["duplicated"]
            broken = (
                faults["missing"] or faults["altered"] or faults["out_of_order"] or not faults["ended_final"]
            )
            figures["broken_streams"] += bool(broken)
    event_seqs = stack.store.event_seqs(task_ids)
    for task_id in task_ids:
        figures["gaps"] += log_holes(logs[task_id], event_seqs.get(task_id, 0))
        if states.get(task_id) == "completed":
            figures["duplicated"] += client_duplicates(get_task(load.url, task_id))
    # Seconds from the end of the outage until the last task accepted before it completed.
    open_then = [
        logs[t][-1].created_at - restored_at
        for t in task_ids
        if logs[t] and logs[t][0].created_at < restored_at and states.get(t) == "completed"
    ]
    figures["worst_resume_s"] = round(max(open_then, default=0.0), 1)
    figures["processes_exited"] = stack.exited()
    return figures


# --- Figures --------------------------------------------------------------------------------
def record(test: str, started: float, **figures) -> dict:
    """Print the figures on one line and append them to test-artifacts/faults.jsonl."""
    figures = {"test": test, **figures, "seconds": round(time.monotonic() - started, 1)}
    figures["at"] = datetime.now(UTC).isoformat(timespec="seconds")
    shown = ", ".join(f"{key} {value}" for key, value in figures.items() if key not in ("test", "at"))
    print(f"\nFAULTS {test}: {shown}")
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES.open("a") as handle:
        handle.write(json.dumps(figures) + "\n")
    return figures
