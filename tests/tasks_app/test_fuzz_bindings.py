"""Property-based fuzz of the A2A bindings: hostile requests never crash the platform.

Hypothesis builds structurally plausible but hostile requests for every binding
and dialect: A2A 1.0 JSON-RPC, the 0.3 and draft dialects on the same endpoint,
and the HTTP+JSON REST binding. Valid shapes are mixed with wrong types, NaN and
Infinity, huge numbers, deep nesting, NUL characters, odd unicode, empty and
huge strings, bad base64 and unknown enum names. Every answer must be:

- no HTTP 5xx and no JSON-RPC -32603 (Internal error);
- well formed: a JSON-RPC 2.0 response (each SSE frame too), or on REST a
  google.rpc.Status body for errors and a JSON object for results;
- and once a run is over, no task is half stored: each has its first event,
  a user message and a state.

Most cases run in-process: the ASGI application (a2a_platform.asgi) is called
directly, so the URLconf, middleware and views are the server's, without the
network. That reaches thousands of cases in seconds. A fifth go at the same time
to the live server over HTTP, where a worker runs the turns, so blocking sends
and streams see the agent's events. derandomize keeps CI reproducible; a
failure prints the request and the answer, and a blob that replays it.
"""

import asyncio
import base64
import json
import logging
import math
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlencode

import httpx
import hypothesis
import pytest
from django.db.models import Exists, OuterRef
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from tasks_app.models import Message, Task, TaskEvent, TaskState
from tests.live import TEST_QUEUE

# Each example sends a batch of cases in-process and one to the live server, at the same
# time (the app gives every request a thread of its own, and the server is a process of its
# own, so their waits overlap). Cases: 4 families * 500 examples * (4 + 1) = 10,000.
EXAMPLES = 500
BATCH = 4
LIVE_BATCH = 1
FUZZ_SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "print_blob": True,
    "phases": [hypothesis.Phase.explicit, hypothesis.Phase.generate, hypothesis.Phase.shrink],
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
}

# Tasks the fuzz may name: filled by the known_tasks fixture before any case runs.
KNOWN_IDS: list[str] = []


# --- JSON with what json.dumps cannot write -----------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text put into a request as is: 1e400, a bare NaN token, 100,000 brackets."""

    text: str


RAW_MARK = re.compile(r'"\\u0000raw:(\d+)\\u0000"')


def dumps(value) -> str:
    raws: list[str] = []

    def default(obj):
        if isinstance(obj, Raw):
            raws.append(obj.text)
            return f"\x00raw:{len(raws) - 1}\x00"
        raise TypeError(type(obj))

    text = json.dumps(value, default=default)  # NaN and +-Infinity come out as bare tokens
    return RAW_MARK.sub(lambda found: raws[int(found.group(1))], text)


# --- Hostile values -------------------------------------------------------------------


def weighted(*choices):
    """One of the (weight, strategy) choices, drawn in proportion to the weights.

    st.one_of is no substitute: it flattens nested one_ofs into one list of equally
    likely branches (a rare alternative with many branches of its own crowds out
    the common one), and a repeated branch counts once.
    """
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(table.__getitem__)


# NaN and the infinities, as bare tokens and as numbers too large for a double.
NON_FINITE = st.sampled_from(
    [math.nan, math.inf, -math.inf, Raw("1e400"), Raw("-1e400"), Raw("1" + "0" * 400 + ".5"), -(10**400)]
)
BIG_INTS = st.sampled_from([2**31, -(2**31) - 1, 2**53 + 1, 2**63, 2**64, 10**30, 10**308])
ODD_NUMBERS = st.sampled_from([Raw("-0"), Raw("-0.0"), Raw("1e-400"), Raw("1E+2"), 5e-324])
NUMBERS = st.one_of(st.integers(), BIG_INTS, st.floats(), NON_FINITE, ODD_NUMBERS)
ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "a\x00b",
        "\u202eevil",
        "\ufeff",
        "😀" * 5,
        "Ω≈ç√",
        "\\u0000",
        "%00",
        "../../etc/passwd",
        "NaN",
        "Infinity",
        "null",
        "ROLE_USER",
        "TASK_STATE_BOGUS",
        "!!!notb64",
        "a b",
        "====",
        "aGk",
        "-_-_",
        "2024-13-45T99:99:99Z",
        "1970-01-01T00:00:00Z",
    ]
)
ID_LENGTH_TEXT = st.integers(250, 300).map("m".__mul__)  # around the 255-character id columns
# Half a surrogate pair: JSON can escape one ("\\ud800"), no UTF-8 text holds it.
UNPAIRED = st.sampled_from(["\ud800", "a\udc00b", "\udfff\ud800", "😀\ud83d"])
HUGE_TEXT = st.integers(10_000, 100_000).map("x".__mul__)
TEXT = weighted((12, st.text(max_size=12)), (5, ODD_TEXT), (2, ID_LENGTH_TEXT), (1, HUGE_TEXT), (1, UNPAIRED))
# What goes into a URL: no huge strings (a proxy would refuse those long before the app).
SHORT_TEXT = weighted((6, st.text(max_size=12)), (3, ODD_TEXT), (1, ID_LENGTH_TEXT))
KEYS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["text", "data", "kind", "type", "id", "role", "parts", "messageId", "metadata", "\x00"]),
    UNPAIRED,
)
LEAF = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
TREE = st.recursive(
    LEAF,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=8,
)


def nested(depth: int) -> Raw:
    return Raw('{"a": ' * depth + "1" + "}" * depth)


def brackets(depth: int) -> Raw:
    return Raw("[" * depth + "]" * depth)


# Around MAX_NESTING; rarely, far past what the JSON parser takes, which fails the whole
# request as unparseable. Built on draw, so a strategy's repr stays small.
DEEP = weighted(
    (6, st.integers(25, 45).map(nested)), (1, st.just(5000).map(nested)), (1, st.just(100_000).map(brackets))
)
HOSTILE = weighted((4, LEAF), (4, TREE), (1, DEEP))


def maybe(valid):
    """Mostly the valid value, sometimes anything at all."""
    return weighted((9, valid), (1, HOSTILE))


def obj(required: dict, optional: dict | None = None):
    return st.fixed_dictionaries(required, optional=optional or {})


STRUCT = weighted(
    (6, st.dictionaries(st.text(max_size=5), TREE, max_size=4)),
    (2, st.dictionaries(st.text(max_size=5), NON_FINITE, min_size=1, max_size=2)),
    (1, st.dictionaries(st.text(max_size=5), st.lists(NUMBERS, max_size=3), max_size=2)),
    (1, DEEP),
)
# What a well-behaved client sends in a Struct: the clean sends below, which reach storage.
FINITE_TREE = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(10**9), 10**9), st.floats(-1e9, 1e9), st.text(max_size=8)
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
FINITE_STRUCT = st.dictionaries(st.text(max_size=5), FINITE_TREE, max_size=3)
# Known tasks, unknown UUIDs, and anything else.
TASK_ID = weighted(
    (3, st.integers(0, 99).map(lambda i: KNOWN_IDS[i % len(KNOWN_IDS)] if KNOWN_IDS else "none")),
    (1, st.uuids().map(str)),
    (1, TEXT),
)
MESSAGE_ID = weighted((4, st.uuids().map(str)), (1, TEXT))
# Only loopback and addresses nobody can reach: the fuzz never sends traffic off the machine.
URL = st.one_of(
    st.integers(1, 65535).map("http://127.0.0.1:{}/hook".format),
    st.sampled_from(["http://[::1]:9/x", "https://127.0.0.1/", "ftp://127.0.0.1/", "http://", "not a url"]),
    st.sampled_from(
        ["javascript:alert(1)", "http://127.0.0.1:99999/", "http://user:pw@127.0.0.1:9/", "/rel"]
    ),
    TEXT.filter(lambda text: "://" not in text),
)
BASE64 = weighted((3, st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode())), (1, TEXT))
ROLE_V1 = st.sampled_from(["ROLE_USER", "ROLE_USER", "ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED", "user"])
STATE_V1 = st.sampled_from(["TASK_STATE_COMPLETED", "TASK_STATE_WORKING", "TASK_STATE_UNSPECIFIED", "done"])
TIMESTAMP = st.sampled_from(["2024-01-01T00:00:00Z", "2024-01-01T00:00:00.123456789Z", "yesterday", ""])
INT = weighted((6, st.integers(-5, 120)), (1, BIG_INTS), (1, NON_FINITE), (1, st.floats(-2, 2)))

# --- A2A 1.0 ---------------------------------------------------------------------------

PART_V1 = st.one_of(
    obj({"text": maybe(TEXT)}, {"metadata": STRUCT, "mediaType": TEXT, "filename": TEXT}),
    obj({"raw": BASE64}, {"mediaType": TEXT, "filename": TEXT}),
    obj({"url": maybe(URL)}, {"mediaType": TEXT}),
    obj({"data": maybe(STRUCT)}, {"metadata": STRUCT}),
    obj({"text": TEXT, "data": STRUCT}),
    st.just({}),
    HOSTILE,
)
MESSAGE_V1 = obj(
    {"role": maybe(ROLE_V1), "messageId": maybe(MESSAGE_ID), "parts": maybe(st.lists(PART_V1, max_size=3))},
    {
        "contextId": TEXT,
        "taskId": TASK_ID,
        "metadata": STRUCT,
        "extensions": st.lists(TEXT, max_size=2),
        "referenceTaskIds": st.lists(TASK_ID, max_size=2),
    },
)
AUTH_V1 = obj({"scheme": maybe(TEXT)}, {"credentials": TEXT})
PUSH_V1 = obj(
    {"url": maybe(URL)}, {"id": TEXT, "token": TEXT, "authentication": maybe(AUTH_V1), "tenant": TEXT}
)
SEND_V1 = obj(
    {"message": maybe(MESSAGE_V1)},
    {
        "configuration": maybe(
            obj(
                {},
                {
                    "acceptedOutputModes": st.lists(TEXT, max_size=2),
                    "historyLength": INT,
                    "returnImmediately": maybe(st.booleans()),
                    "taskPushNotificationConfig": maybe(PUSH_V1),
                },
            )
        ),
        "metadata": STRUCT,
        "tenant": maybe(st.just("demo")),
    },
)
TASK_V1 = obj({"id": maybe(TASK_ID)}, {"historyLength": INT, "tenant": maybe(st.just("demo"))})
LIST_V1 = obj(
    {},
    {
        "contextId": TEXT,
        "status": maybe(STATE_V1),
        "pageSize": INT,
        "pageToken": TEXT,
        "historyLength": INT,
        "statusTimestampAfter": maybe(TIMESTAMP),
        "includeArtifacts": maybe(st.booleans()),
    },
)
PUSH_CONFIG_V1 = obj(
    {"taskId": maybe(TASK_ID), "url": maybe(URL)}, {"id": TEXT, "token": TEXT, "authentication": AUTH_V1}
)
PUSH_REF_V1 = obj({"taskId": maybe(TASK_ID), "id": maybe(TEXT)})
# A send that should be stored (unless its text holds a NUL or the like), so that plenty of
# tasks exist for the other cases to name and for the half-stored check to look at.
CLEAN_SEND_V1 = obj(
    {
        "message": obj(
            {
                "role": st.just("ROLE_USER"),
                "messageId": st.uuids().map(str),
                "parts": st.lists(
                    st.one_of(obj({"text": st.text(max_size=20)}), obj({"data": FINITE_STRUCT})),
                    min_size=1,
                    max_size=2,
                ),
            },
            {"metadata": FINITE_STRUCT, "contextId": st.sampled_from(["ctx-1", "ctx-2"])},
        )
    },
    {"configuration": obj({}, {"returnImmediately": st.booleans(), "historyLength": st.integers(0, 5)})},
)
SOME_SEND_V1 = weighted((1, CLEAN_SEND_V1), (2, SEND_V1))
V1_PARAMS = {
    "SendMessage": SOME_SEND_V1,
    "SendStreamingMessage": SOME_SEND_V1,
    "GetTask": TASK_V1,
    "CancelTask": obj({"id": maybe(TASK_ID)}, {"metadata": STRUCT}),
    "SubscribeToTask": obj({"id": maybe(TASK_ID)}),
    "ListTasks": LIST_V1,
    "GetExtendedAgentCard": obj({}),
    "CreateTaskPushNotificationConfig": PUSH_CONFIG_V1,
    "GetTaskPushNotificationConfig": PUSH_REF_V1,
    "ListTaskPushNotificationConfigs": obj({"taskId": maybe(TASK_ID)}, {"pageSize": INT, "pageToken": TEXT}),
    "DeleteTaskPushNotificationConfig": PUSH_REF_V1,
}

# --- A2A 0.3 ---------------------------------------------------------------------------

FILE_V03 = st.one_of(
    obj({"bytes": BASE64}, {"mimeType": TEXT, "name": TEXT}),
    obj({"uri": maybe(URL)}, {"mimeType": TEXT, "name": TEXT}),
    obj({"bytes": BASE64, "uri": URL}),
)
PART_V03 = st.one_of(
    obj({"kind": maybe(st.just("text")), "text": maybe(TEXT)}, {"metadata": STRUCT}),
    obj({"kind": maybe(st.just("file")), "file": maybe(FILE_V03)}, {"metadata": STRUCT}),
    obj({"kind": maybe(st.just("data")), "data": maybe(STRUCT)}, {"metadata": STRUCT}),
    HOSTILE,
)
MESSAGE_V03 = obj(
    {
        "kind": maybe(st.just("message")),
        "role": maybe(st.sampled_from(["user", "user", "agent", "ROLE_USER"])),
        "messageId": maybe(MESSAGE_ID),
        "parts": maybe(st.lists(PART_V03, max_size=3)),
    },
    {
        "contextId": TEXT,
        "taskId": TASK_ID,
        "metadata": STRUCT,
        "referenceTaskIds": st.lists(TASK_ID, max_size=2),
    },
)
PUSH_V03 = obj(
    {"url": maybe(URL)},
    {
        "id": TEXT,
        "token": TEXT,
        "authentication": obj({"schemes": st.lists(TEXT, max_size=2)}, {"credentials": TEXT}),
    },
)
SEND_V03 = obj(
    {"message": maybe(MESSAGE_V03)},
    {
        "configuration": maybe(
            obj(
                {},
                {
                    "acceptedOutputModes": st.lists(TEXT, max_size=2),
                    "blocking": maybe(st.booleans()),
                    "historyLength": INT,
                    "pushNotificationConfig": maybe(PUSH_V03),
                },
            )
        ),
        "metadata": STRUCT,
    },
)
QUERY_V03 = obj({"id": maybe(TASK_ID)}, {"historyLength": INT, "metadata": STRUCT})
CLEAN_SEND_V03 = obj(
    {
        "message": obj(
            {
                "kind": st.just("message"),
                "role": st.just("user"),
                "messageId": st.uuids().map(str),
                "parts": st.lists(
                    st.one_of(
                        obj({"kind": st.just("text"), "text": st.text(max_size=20)}),
                        obj({"kind": st.just("data"), "data": FINITE_STRUCT}),
                    ),
                    min_size=1,
                    max_size=2,
                ),
            },
            {"metadata": FINITE_STRUCT},
        )
    },
    {"configuration": obj({}, {"blocking": st.booleans(), "historyLength": st.integers(0, 5)})},
)
SOME_SEND_V03 = weighted((1, CLEAN_SEND_V03), (2, SEND_V03))
V03_PARAMS = {
    "message/send": SOME_SEND_V03,
    "message/stream": SOME_SEND_V03,
    "tasks/get": QUERY_V03,
    "tasks/cancel": QUERY_V03,
    "tasks/resubscribe": QUERY_V03,
    "tasks/pushNotificationConfig/set": obj(
        {"taskId": maybe(TASK_ID), "pushNotificationConfig": maybe(PUSH_V03)}
    ),
    "tasks/pushNotificationConfig/get": obj({"id": maybe(TASK_ID)}, {"pushNotificationConfigId": TEXT}),
    "tasks/pushNotificationConfig/list": obj({"id": maybe(TASK_ID)}),
    "tasks/pushNotificationConfig/delete": obj(
        {"id": maybe(TASK_ID), "pushNotificationConfigId": maybe(TEXT)}
    ),
    "agent/getAuthenticatedExtendedCard": obj({}),
}

# --- The draft (0.1) -------------------------------------------------------------------

DRAFT_TYPES = st.sampled_from(["text", "file", "data", "TextPart", "FilePart", "DataPart", "image"])
PART_DRAFT = st.one_of(
    obj({"type": maybe(DRAFT_TYPES), "text": maybe(TEXT)}, {"metadata": STRUCT}),
    obj({"type": maybe(DRAFT_TYPES), "file": maybe(FILE_V03)}, {"metadata": STRUCT}),
    obj({"type": maybe(DRAFT_TYPES), "data": maybe(STRUCT)}, {"metadata": STRUCT}),
    HOSTILE,
)
PUSH_DRAFT = obj(
    {"url": maybe(URL)},
    {
        "token": TEXT,
        "authentication": obj({"schemes": maybe(st.lists(TEXT, max_size=2))}, {"credentials": TEXT}),
    },
)
SEND_DRAFT = obj(
    {
        "id": maybe(st.one_of(st.uuids().map("draft-{}".format), TASK_ID)),
        "message": maybe(
            obj(
                {"role": maybe(st.just("user")), "parts": maybe(st.lists(PART_DRAFT, max_size=3))},
                {"metadata": STRUCT},
            )
        ),
    },
    {
        "sessionId": TEXT,
        "historyLength": INT,
        "pushNotification": maybe(PUSH_DRAFT),
        "metadata": STRUCT,
        "acceptedOutputModes": st.lists(TEXT, max_size=2),
    },
)
CLEAN_SEND_DRAFT = obj(
    {
        "id": st.uuids().map("draft-{}".format),
        "message": obj(
            {
                "role": st.just("user"),
                "parts": st.lists(
                    st.one_of(
                        obj({"type": st.just("text"), "text": st.text(max_size=20)}),
                        obj({"type": st.just("data"), "data": FINITE_STRUCT}),
                    ),
                    min_size=1,
                    max_size=2,
                ),
            },
            {"metadata": FINITE_STRUCT},
        ),
    },
    {"sessionId": st.sampled_from(["session-1", "session-2"]), "historyLength": st.integers(0, 5)},
)
SOME_SEND_DRAFT = weighted((1, CLEAN_SEND_DRAFT), (2, SEND_DRAFT))
DRAFT_PARAMS = {
    "tasks/send": SOME_SEND_DRAFT,
    "tasks/sendSubscribe": SOME_SEND_DRAFT,
    "tasks/get": QUERY_V03,
    "tasks/cancel": QUERY_V03,
    "tasks/resubscribe": QUERY_V03,
    "tasks/pushNotification/set": obj({"id": maybe(TASK_ID), "pushNotificationConfig": maybe(PUSH_DRAFT)}),
    "tasks/pushNotification/get": obj({"id": maybe(TASK_ID)}),
}

# --- Requests --------------------------------------------------------------------------

# The methods that store tasks, drawn more often than the others.
SENDS = (SOME_SEND_V1, SOME_SEND_V03, SOME_SEND_DRAFT)


@dataclass
class Case:
    verb: str
    path: str  # under /a2a/, already percent-encoded
    headers: dict[str, str]
    body: bytes = b""
    binding: str = "jsonrpc"
    # The JSON-RPC id the answer must carry, when the request had a valid one.
    request_id: object = None


AGENT = st.sampled_from(["echo"] * 12 + ["clarify", "secure-echo", "no-such-agent"])
CONTENT_TYPE = st.sampled_from(
    ["application/json"] * 10
    + ["application/a2a+json", "text/plain", "application/x-www-form-urlencoded", ""]
)
LAST_EVENT_ID = st.sampled_from(["0", "1", "2", "99999", "-1", "abc", "²", "1" * 120])
REQUEST_ID = weighted(
    (4, st.integers(-(2**70), 2**70)), (4, st.text(max_size=8)), (1, st.none()), (1, HOSTILE)
)
BAD_BODIES = st.one_of(
    st.sampled_from(
        [b"", b"{", b"[]", b"null", b"42", b'"x"', b"\xff\xfe", b'{"jsonrpc": "2.0", "method": NaN}']
    ),
    st.just(100_000).map(lambda depth: b"[" * depth),
)
# Whether to send a field as is (most often), leave it out, or send anything at all instead.
AS_IS, LEFT_OUT, REPLACED = "as is", "left out", "replaced"
HOW = st.sampled_from([AS_IS] * 18 + [LEFT_OUT, REPLACED])


def version_header(default: str | None):
    choices = [default] * 20 + [None, "0.3", "1", "2.0", "1.0.0", "abc"]
    return st.sampled_from(choices)


@st.composite
def jsonrpc_cases(draw, dialect: str) -> Case:
    methods, version = {
        "1.0": (V1_PARAMS, "1.0"),
        "0.3": (V03_PARAMS, None),
        "draft": (DRAFT_PARAMS, None),
    }[dialect]
    names = sorted(methods)
    sends = [name for name in names if methods[name] in SENDS]
    method = draw(weighted((5, st.sampled_from(names)), (3, st.sampled_from(sends)), (1, TEXT)))
    envelope = {}
    for key, value in (
        ("jsonrpc", "2.0"),
        ("id", draw(REQUEST_ID)),
        ("method", method),
        ("params", draw(methods[method] if method in methods else SEND_V1)),
    ):
        how = draw(HOW)
        if how != LEFT_OUT:
            envelope[key] = value if how == AS_IS else draw(HOSTILE)
    headers = {}
    sent_version = draw(version_header(version))
    if sent_version is not None:
        headers["A2A-Version"] = sent_version
    content_type = draw(CONTENT_TYPE)
    if content_type:
        headers["Content-Type"] = content_type
    if draw(st.integers(0, 30)) == 0:
        headers["Last-Event-ID"] = draw(LAST_EVENT_ID)
    body = draw(weighted((30, st.none()), (1, BAD_BODIES)))
    if body is None:
        body = dumps(envelope).encode()
    return Case(
        verb="POST", path=f"demo/{draw(AGENT)}/", headers=headers, body=body, request_id=sent_id(body)
    )


def sent_id(body: bytes):
    """The id a JSON-RPC answer to this body must echo: a valid request id, else None."""
    try:
        request_id = json.loads(body).get("id")
    except Exception:  # not JSON, not an object, nested too deeply
        return None
    return None if isinstance(request_id, bool) or not isinstance(request_id, str | int) else request_id


def segment(value: str) -> str:
    # An unpaired surrogate goes as the bytes UTF-8 would give it: invalid UTF-8 in the path.
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


CANCEL_BODY = obj({}, {"metadata": STRUCT})
PUSH_BODY = obj({"url": maybe(URL)}, {"id": TEXT, "token": TEXT})
EMPTY_BODY = obj({})
QUERY = st.dictionaries(
    st.sampled_from(
        ["historyLength", "pageSize", "pageToken", "contextId", "status", "includeArtifacts"]
        + ["statusTimestampAfter", "tenant", "id", "taskId", "A2A-Version", "x"]
    ),
    st.one_of(st.text(max_size=8), ODD_TEXT, st.integers().map(str), NUMBERS.map(str)),
    max_size=4,
)
REST_CONTENT_TYPE = st.sampled_from(
    ["application/a2a+json"] * 3 + ["application/json"] * 3 + ["text/plain", ""]
)


@st.composite
def rest_cases(draw) -> Case:
    task_id = segment(draw(st.one_of(TASK_ID.filter(lambda text: len(text) < 1000), SHORT_TEXT)))
    config_id = segment(draw(SHORT_TEXT)) or "c1"
    routes = [
        ("POST", "message:send", SOME_SEND_V1),
        ("POST", "message:send", SOME_SEND_V1),
        ("POST", "message:stream", SOME_SEND_V1),
        ("POST", f"tasks/{task_id}:cancel", CANCEL_BODY),
        ("GET", f"tasks/{task_id}:subscribe", None),
        ("POST", f"tasks/{task_id}:subscribe", EMPTY_BODY),
        ("GET", f"tasks/{task_id}", None),
        ("GET", "tasks", None),
        ("POST", f"tasks/{task_id}/pushNotificationConfigs", PUSH_BODY),
        ("GET", f"tasks/{task_id}/pushNotificationConfigs", None),
        ("GET", f"tasks/{task_id}/pushNotificationConfigs/{config_id}", None),
        ("DELETE", f"tasks/{task_id}/pushNotificationConfigs/{config_id}", None),
        ("GET", "extendedAgentCard", None),
        ("POST", segment(draw(SHORT_TEXT)) or "x", SEND_V1),
    ]
    verb, path, body_strategy = routes[draw(st.integers(0, len(routes) - 1))]
    verb = draw(st.sampled_from([verb] * 12 + ["GET", "POST", "DELETE", "PUT", "PATCH"]))
    prefix = draw(st.sampled_from([""] * 6 + ["demo/", "globex/", "%00/"]))
    query = draw(QUERY) if verb in ("GET", "DELETE") or draw(st.integers(0, 5)) == 0 else {}
    headers = {}
    sent_version = draw(version_header("1.0"))
    if sent_version is not None:
        headers["A2A-Version"] = sent_version
    content_type = draw(REST_CONTENT_TYPE)
    if content_type:
        headers["Content-Type"] = content_type
    if draw(st.integers(0, 30)) == 0:
        headers["Last-Event-ID"] = draw(LAST_EVENT_ID)
    body = b""
    if body_strategy is not None or verb in ("POST", "PUT", "PATCH"):
        body = draw(weighted((20, st.none()), (1, BAD_BODIES)))
        if body is None:
            body = dumps(draw(maybe(body_strategy if body_strategy is not None else EMPTY_BODY))).encode()
    query_text = urlencode(query, quote_via=quote)
    path = f"demo/{draw(AGENT)}/rest/{prefix}{path}" + (f"?{query_text}" if query_text else "")
    return Case(verb=verb, path=path, headers=headers, body=body, binding="rest")


FAMILIES = {
    "jsonrpc-1.0": jsonrpc_cases("1.0"),
    "jsonrpc-0.3": jsonrpc_cases("0.3"),
    "jsonrpc-draft": jsonrpc_cases("draft"),
    "rest": rest_cases(),
}


# --- The properties ------------------------------------------------------------------


def strict_json(raw: bytes | str):
    """json.loads that refuses the NaN and Infinity tokens: an answer must be real JSON."""

    def refuse(token):
        raise AssertionError(f"the answer holds the non-JSON token {token}")

    return json.loads(raw, parse_constant=refuse)


def sse_frames(raw: bytes) -> list[dict]:
    frames = []
    for block in raw.decode().split("\n\n"):
        data = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if data:
            frames.append(strict_json("\n".join(data)))
    return frames


def check_jsonrpc_object(answer, case: Case) -> None:
    assert isinstance(answer, dict) and answer.get("jsonrpc") == "2.0", answer
    assert "id" in answer, answer
    assert answer["id"] in (case.request_id, None), (answer["id"], case.request_id)
    assert ("result" in answer) != ("error" in answer), answer
    if "error" in answer:
        error = answer["error"]
        assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str), error
        assert error["code"] != -32603, error


def check_answer(case: Case, status: int, content_type: str, body: bytes) -> None:
    """The properties every answer has; a failure names the answer in a few lines, whatever its size."""
    try:
        _check_answer(case, status, content_type, body)
    except AssertionError as failure:
        answer = f"answered {status} {content_type} {body[:1500]!r}"
        raise AssertionError(f"{describe(case)}\n{answer}\n{str(failure)[:1500]}") from None


def _check_answer(case: Case, status: int, content_type: str, body: bytes) -> None:
    assert status < 500, (status, body[:2000])
    if content_type.startswith("text/event-stream"):
        assert status == 200, status
        for frame in sse_frames(body):
            if case.binding == "jsonrpc":
                check_jsonrpc_object(frame, case)
            else:
                assert isinstance(frame, dict) and frame, frame
        return
    assert content_type.split(";")[0] in ("application/json", "application/a2a+json"), (
        content_type,
        body[:500],
    )
    answer = strict_json(body)
    if case.binding == "jsonrpc":
        check_jsonrpc_object(answer, case)
        return
    assert isinstance(answer, dict), answer
    if status >= 400:
        assert isinstance(answer.get("error"), dict), answer
        error = answer["error"]
        assert error["code"] == status, error
        assert isinstance(error["status"], str) and isinstance(error["message"], str), error
        assert isinstance(error["details"], list), error


def describe(case: Case) -> str:
    return f"{case.verb} /a2a/{case.path[:300]} {case.headers} body={case.body[:1500]!r}"


def half_stored_tasks(since) -> list[str]:
    """Tasks stored since `since` without their first event, a user message or a known state.

    Only the fuzz's own: other tests make rows straight through the ORM.
    """
    tasks = (
        Task.objects.filter(created_at__gte=since)
        .annotate(
            first_event=Exists(TaskEvent.objects.filter(task=OuterRef("pk"), seq=1)),
            user_message=Exists(Message.objects.filter(task=OuterRef("pk"), role=Message.Role.USER)),
        )
        .values_list("pk", "state", "first_event", "user_message")
    )
    return [
        f"{pk} state={state} first_event={first} user_message={user}"
        for pk, state, first, user in tasks
        if not (first and user and state in TaskState.values)
    ]


# --- In-process: the ASGI application ---------------------------------------------------


async def call_asgi(application, case: Case) -> tuple[int, str, bytes]:
    """One request straight into the ASGI app; a stream is read to its first event, then dropped."""
    path, _, query = case.path.partition("?")
    raw_path = f"/a2a/{path}"
    headers = [(b"host", b"127.0.0.1")]
    headers += [(name.lower().encode(), value.encode()) for name, value in case.headers.items()]
    headers.append((b"content-length", str(len(case.body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": case.verb,
        "scheme": "http",
        "path": unquote(raw_path),
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    gone = asyncio.Event()
    enough = asyncio.Event()
    body_sent = False
    start: dict = {}
    chunks: list[bytes] = []

    async def receive():
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": case.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            # A finished answer, or a stream's first event: enough to judge.
            if not message.get("more_body") or b"data:" in b"".join(chunks):
                enough.set()

    app = asyncio.ensure_future(application(scope, receive, send))
    waiter = asyncio.ensure_future(enough.wait())
    # Enough time for a blocking send's turn on a busy 2-core machine; most answers take milliseconds.
    await asyncio.wait({app, waiter}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    gone.set()  # the client goes away: an open stream is closed the way Daphne closes it
    try:
        await asyncio.wait_for(app, timeout=10)
    except TimeoutError:
        pytest.fail(f"the app did not let go of a request after the client left: {case}")
    assert start, f"no response at all to {case}"
    content_type = {k.lower(): v for k, v in start.get("headers", [])}.get(b"content-type", b"").decode()
    return start["status"], content_type, b"".join(chunks)


@pytest.fixture(scope="module")
def known_tasks(server, stored):
    """A few real tasks for the fuzz to name: completed 1.0 and draft tasks, one waiting for input."""
    if KNOWN_IDS:
        return KNOWN_IDS
    for agent in ("echo", "echo", "clarify"):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": "hi"}]}
            },
        }
        answer = httpx.post(
            server.agent_url(agent), json=body, headers={"A2A-Version": "1.0"}, timeout=60
        ).json()
        KNOWN_IDS.append(answer["result"]["task"]["id"])
    draft = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tasks/send",
        "params": {
            "id": "fuzz-draft-task",
            "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]},
        },
    }
    assert "result" in httpx.post(server.agent_url("echo"), json=draft, timeout=60).json()
    KNOWN_IDS.append("fuzz-draft-task")
    return KNOWN_IDS


@pytest.fixture
def in_process(settings):
    """The ASGI app on an event loop of its own, with what a test process needs to serve A2A."""
    from a2a_platform.asgi import application
    from a2a_platform.celery import app as celery_app

    # No worker runs turns in this process: a blocking send answers with the stored task at once.
    settings.A2A_BLOCKING_TIMEOUT = 0.0
    # Services mode: turns go to this session's worker, never to a shared queue.
    queue = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = TEST_QUEUE
    # Thousands of 4xx answers, each logged as a warning, would only slow the run down.
    request_log = logging.getLogger("django.request")
    level = request_log.level
    request_log.setLevel(logging.ERROR)
    loop = asyncio.new_event_loop()

    async def send_all(cases):
        return await asyncio.gather(*(call_asgi(application, case) for case in cases))

    yield lambda cases: loop.run_until_complete(send_all(cases))
    loop.close()
    request_log.setLevel(level)
    celery_app.conf.task_default_queue = queue


# --- Over HTTP: the live server, with its worker -------------------------------------


def call_live(client: httpx.Client, base_url: str, case: Case) -> tuple[int, str, bytes]:
    """One request to the live server; a stream is read until it ends or for a second and a half."""
    # A stream stays open while its task waits for input: judged on what came in a second
    # and a half. A blocking send may wait for the worker, which has a backlog in a fuzz.
    streaming = any(mark in case.path for mark in (":stream", ":subscribe")) or any(
        mark in case.body for mark in (b"Stream", b"ubscribe")
    )
    request = client.build_request(
        case.verb,
        f"{base_url}/a2a/{case.path}",
        headers={name: value.encode() for name, value in case.headers.items()},
        content=case.body,
        timeout=httpx.Timeout(60, read=1.5 if streaming else 60),
    )
    response = client.send(request, stream=True)
    try:
        chunks = []
        deadline = time.monotonic() + 1.5
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            try:
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        break
            except httpx.ReadTimeout:
                pass  # a quiet open stream (a task waiting for input): judged on what came
        else:
            chunks.append(response.read())
    finally:
        response.close()
    return response.status_code, response.headers.get("content-type", ""), b"".join(chunks)


@pytest.fixture(scope="module")
def live(server):
    """Send cases to the live server from threads, so they run while the in-process ones do."""
    with httpx.Client() as client, ThreadPoolExecutor(LIVE_BATCH) as pool:
        yield lambda cases: [pool.submit(call_live, client, server.base_url, case) for case in cases]


# --- The fuzz ------------------------------------------------------------------------


# Services mode: kombu and channels-redis threads in this process use `random` while
# Hypothesis draws, which it takes for a strategy using it.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fuzz_never_crashes_nor_half_stores(family, server, known_tasks, in_process, live):
    counts = {"in-process": 0, "live": 0}
    started = time.monotonic()
    since = timezone.now()
    logs = {process.name: len(process.output()) for process in server.processes}

    @hypothesis.settings(max_examples=EXAMPLES, **FUZZ_SETTINGS)
    @given(
        local=st.lists(FAMILIES[family], min_size=BATCH, max_size=BATCH),
        remote=st.lists(FAMILIES[family], min_size=LIVE_BATCH, max_size=LIVE_BATCH),
    )
    def run(local, remote):
        sent = live(remote)  # on their way while the in-process batch runs
        answers = in_process(local)
        counts["in-process"] += len(local)
        counts["live"] += len(remote)
        for case, answer in zip(local, answers, strict=True):
            check_answer(case, *answer)
        for case, future in zip(remote, sent, strict=True):
            check_answer(case, *future.result())

    run()
    took = time.monotonic() - started
    print(
        f"fuzz {family}: {counts['in-process']} cases in-process, {counts['live']} live, in {took:.1f} s;"
        f" {Task.objects.filter(created_at__gte=since).count()} tasks stored"
    )
    assert counts == {"in-process": EXAMPLES * BATCH, "live": EXAMPLES * LIVE_BATCH}
    for process in server.processes:
        new = process.output()[logs[process.name] :]
        assert "Unhandled error" not in new and "Exception inside application" not in new, new[-4000:]
    stored = Task.objects.filter(created_at__gte=since).count()
    assert stored > 0, "the fuzz stored no task: the half-stored check would look at nothing"
    assert half_stored_tasks(since) == []
