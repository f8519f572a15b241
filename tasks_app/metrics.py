"""The platform's Prometheus metrics: defined here, recorded where things happen, served by /metrics.

Counters and histograms are recorded in whichever process does the work (a
binding in a web process, a turn or a push delivery in a worker). With
PROMETHEUS_MULTIPROC_DIR set, prometheus_client's multiprocess mode keeps each
process's values in files of that directory, and the process serving /metrics
adds them all up (a2a_platform/health.py), so several Daphne and Celery
processes report one view. Without it (the embedded default: one process) the
values live in memory.

Multiprocess mode names each process's files by a process identifier. The
default, the pid, collides across containers that share the directory (every
container's main process is pid 1), so the identifier is host-pid. The scrape
forgets the live gauges of processes of its own host that are gone
(forget_dead_processes); a process that exits cleanly forgets its own.

Gauges read from the store (tasks by state, queue depth) are not here: the
serving process computes them at scrape time.
"""

import atexit
import functools
import glob
import os
import re
import socket
import time

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics, values
from prometheus_client.multiprocess import mark_process_dead

MULTIPROCESS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")

# Label values for what a request did not name (bounded: unknown method names all count as one).
UNKNOWN = "unknown"
OK = "ok"


def process_identifier() -> str:
    """This process in file names: host and pid ('_' separates fields in those names)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


# No *_created series: multiprocess mode has none, so both modes expose the same names.
disable_created_metrics()

if MULTIPROCESS_DIR:
    os.makedirs(MULTIPROCESS_DIR, exist_ok=True)
    # Before any metric is made: every value below goes to this process's files.
    values.ValueClass = values.MultiProcessValue(process_identifier)
    # A restarted container comes back with its old host name and pid: its live gauges start afresh.
    mark_process_dead(process_identifier(), MULTIPROCESS_DIR)
    atexit.register(lambda: mark_process_dead(process_identifier(), MULTIPROCESS_DIR))


# --- The metrics ------------------------------------------------------------------
REQUESTS = Counter(
    "a2a_requests",
    "A2A requests answered, by binding, method and outcome (ok, or the error's name).",
    ["binding", "method", "outcome"],
)
REQUEST_SECONDS = Histogram(
    "a2a_request_duration_seconds",
    "Seconds from a request's arrival to its answer (for a stream: to its first byte).",
    ["binding", "method"],
)
TURN_SECONDS = Histogram(
    "a2a_turn_duration_seconds",
    "Seconds an agent turn ran, by the agent's handler and how the turn ended.",
    ["handler", "outcome"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, float("inf")),
)
# Summed over the processes alive now (livesum): a dead process's streams are gone with it.
# Used as `with ACTIVE_STREAMS.track_inprogress():` around a stream.
ACTIVE_STREAMS = Gauge(
    "a2a_active_streams",
    "SSE streams open now (SendStreamingMessage, SubscribeToTask and the older dialects').",
    multiprocess_mode="livesum",
)
PUSH_DELIVERIES = Counter(
    "a2a_push_deliveries",
    "Push notification attempts, by outcome: succeeded, failed (tried again later), given_up.",
    ["outcome"],
)
SWEPT_TURNS = Counter(
    "a2a_swept_turns",
    "Turns the sweeper acted on, by action: run_again (its worker was lost), copied (still queued: "
    "its job sent again), failed (lost on its last attempt: its task failed).",
    ["action"],
)
QUOTA_REFUSALS = Counter(
    "a2a_quota_refusals",
    "Requests refused by a quota, by reason (the quota's name, never a tenant).",
    ["reason"],
)


# --- Recording ----------------------------------------------------------------------
def request_done(binding: str, method: str, outcome: str, seconds: float) -> None:
    """Count one answered request (any binding: jsonrpc, rest, grpc)."""
    REQUESTS.labels(binding, method, outcome).inc()
    REQUEST_SECONDS.labels(binding, method).observe(seconds)


def observe_requests(binding: str):
    """Decorate an async binding view: count and time each request.

    The view names the method it resolved (`request.a2a_method`) and an error
    answer carries its outcome (`response.a2a_outcome`, set by error_outcome()).
    """

    def decorate(view):
        @functools.wraps(view)
        async def observed(request, *args, **kwargs):
            started = time.perf_counter()
            outcome = "internal"
            try:
                response = await view(request, *args, **kwargs)
                outcome = getattr(response, "a2a_outcome", OK)
                return response
            finally:
                method = getattr(request, "a2a_method", UNKNOWN)
                request_done(binding, method, outcome, time.perf_counter() - started)

        return observed

    return decorate


def name_method(request, method: str, known) -> None:
    """Label the request with its method, or 'unknown' for a name outside `known` (bounded labels)."""
    request.a2a_method = method if method in known else UNKNOWN


# HTTP statuses whose answers say more than the error type does (a 401 and a 403 are both InvalidRequest).
_STATUS_OUTCOMES = {401: "unauthenticated", 403: "forbidden", 405: "method_not_allowed", 413: "too_large"}


def error_outcome(response, error: Exception, status: int | None = None):
    """Mark an error answer with its outcome label (snake_case of the error type); returns the response."""
    outcome = _STATUS_OUTCOMES.get(status or 0)
    if outcome is None:
        name = type(error).__name__.removesuffix("Error") or "Error"
        outcome = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    response.a2a_outcome = outcome
    return response


def turn_done(handler: str, outcome: str, seconds: float) -> None:
    TURN_SECONDS.labels(handler or UNKNOWN, outcome).observe(seconds)


def push_attempt(outcome: str) -> None:
    PUSH_DELIVERIES.labels(outcome).inc()


def turn_swept(action: str) -> None:
    """Count what the sweeper did to a turn: run_again, copied or failed."""
    SWEPT_TURNS.labels(action).inc()


def quota_refused(reason: str) -> None:
    """Count a request a quota refused. `reason` names the quota (bounded), never the tenant."""
    QUOTA_REFUSALS.labels(reason).inc()


# --- Multiprocess housekeeping --------------------------------------------------------
_LIVE_FILE = re.compile(r"gauge_live[a-z]+_(?P<identifier>.+)\.db$")


def forget_dead_processes(path: str = MULTIPROCESS_DIR) -> int:
    """Drop the live gauges of this host's processes that are gone (killed, say); how many were gone.

    Their counters and histograms stay: what a dead process counted still happened.
    """
    prefix = process_identifier().rpartition("-")[0] + "-"
    gone = set()
    for name in glob.glob(os.path.join(path, "gauge_live*.db")):
        found = _LIVE_FILE.search(os.path.basename(name))
        identifier = found["identifier"] if found else ""
        pid = identifier.removeprefix(prefix)
        if identifier.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
            gone.add(identifier)
    for identifier in gone:
        mark_process_dead(identifier, path)
    return len(gone)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
