"""Tenant quotas: checked when an A2A request arrives, before anything is stored.

Two limits, both set per tenant (tenants.Tenant; None means no limit):

- rate_limit_per_minute: A2A requests per minute from each caller, counted
  per OAuth client (its principal, "client:<id>"; a person's "user:<id>"), and
  per source address for anonymous callers of public agents. Every method
  counts, reads included: a client polling GetTask costs what it sends. A
  fixed window of one minute, counted in Redis with one atomic HINCRBY (all
  web processes share it) in services mode and in this process's memory
  embedded. A refused request counts too, so hammering does not help.
- max_running_turns: agent turns queued or running at once in the tenant;
  only sends (SendMessage, SendStreamingMessage and the older dialects' send
  methods, which run as those) are refused. Counted from the database (user
  messages whose turn is pending or running), not from a counter: a worker
  that dies holds nothing here, and once the sweeper settles its turn the
  slot is free again. Exact under concurrency: the transaction that stores a
  send locks the tenant's row and counts again (quota_turn_claim), so sends
  of one tenant that arrive at once are counted one after another, each
  seeing the turns the ones before it stored.

The bindings call quota_admit() after resolving the caller (the rate, and an
early, unlocked look at the running turns that refuses a full tenant without
opening a transaction, unless the send repeats one stored under its
Idempotency-Key); message_send calls quota_turn_claim(). A refusal raises
QuotaExceeded (defined here), which every binding
answers as "too many requests" with the seconds to wait. If Redis cannot be
reached the rate is not enforced (logged) rather than refusing every caller.
"""

import logging
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from a2a.utils.error_handlers import A2A_DOMAIN, ERROR_INFO_TYPE
from a2a.utils.errors import A2AError
from django.conf import settings

from tasks_app import metrics
from tasks_app.access import Caller
from tasks_app.db import db
from tasks_app.dispatch import redis_client
from tasks_app.models import IdempotencyKey, Message
from tenants.models import Tenant

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
# The 1.0 methods that start a turn; the older dialects' sends resolve their caller as these.
# A full tenant cannot know when a turn ends; callers are told to try again after this.
RUNNING_TURNS_RETRY_AFTER = 5
# After Redis fails, skip it for this long instead of waiting on it in every request.
REDIS_BACKOFF_SECONDS = 5.0
OPEN_TURNS = (Message.Turn.PENDING, Message.Turn.RUNNING)
RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"


class QuotaExceeded(A2AError):
    """A tenant's quota refuses the request before anything is stored.

    `reason` is "RATE_LIMIT_EXCEEDED" (requests per minute) or "RUNNING_TURNS_EXCEEDED";
    `retry_after` the whole seconds to wait; `limit` the limit that refused. Every
    binding answers it as "too many requests": HTTP 429 with Retry-After (REST and
    JSON-RPC), JSON-RPC code QUOTA_EXCEEDED_CODE with data {"retryAfter", "reason",
    "limit"}, gRPC RESOURCE_EXHAUSTED (with ErrorInfo and RetryInfo details).
    """

    RATE = "RATE_LIMIT_EXCEEDED"
    RUNNING_TURNS = "RUNNING_TURNS_EXCEEDED"

    def __init__(self, message: str, *, reason: str, retry_after: float, limit: int):
        self.reason = reason
        # Whole seconds, at least one: Retry-After takes an integer.
        self.retry_after = max(1, math.ceil(retry_after))
        self.limit = limit
        super().__init__(
            message=message, data={"retryAfter": self.retry_after, "reason": reason, "limit": limit}
        )

    def details(self) -> list[dict]:
        """google.rpc details: ErrorInfo (reason, domain, metadata) and RetryInfo."""
        metadata = {"retryAfter": str(self.retry_after), "limit": str(self.limit)}
        return [
            {"@type": ERROR_INFO_TYPE, "reason": self.reason, "domain": A2A_DOMAIN, "metadata": metadata},
            {"@type": RETRY_INFO_TYPE, "retryDelay": f"{self.retry_after}s"},
        ]


def _window(now: float) -> int:
    return int(now // WINDOW_SECONDS)


class MemoryCounters:
    """Requests per caller per window in this process (the embedded default has one process)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._windows: dict[tuple[int, int], Counter] = {}

    def hit(self, tenant_id: int, who: str, window: int) -> int:
        with self._lock:
            # Drop windows that ended: memory stays bounded by one minute of callers.
            for key in [key for key in self._windows if key[1] < window]:
                del self._windows[key]
            counts = self._windows.setdefault((tenant_id, window), Counter())
            counts[who] += 1
            return counts[who]

    def counts(self, tenant_id: int, window: int) -> dict[str, int]:
        with self._lock:
            return dict(self._windows.get((tenant_id, window), {}))


class RedisCounters:
    """Requests per caller per window in Redis: one hash per tenant and minute, shared by all processes."""

    def __init__(self, url: str):
        self._client = redis_client(url)
        self._down_until = 0.0

    @staticmethod
    def _key(tenant_id: int, window: int) -> str:
        return f"a2a:quota:rate:{tenant_id}:{window}"

    def hit(self, tenant_id: int, who: str, window: int) -> int | None:
        """The caller's count after this request, or None when Redis is unreachable."""
        if time.monotonic() < self._down_until:
            return None
        key = self._key(tenant_id, window)
        try:
            # MULTI/EXEC: the count and the key's expiry are set together, or neither.
            pipe = self._client.pipeline(transaction=True)
            pipe.hincrby(key, who, 1)
            pipe.expire(key, WINDOW_SECONDS * 2)
            count, _ = pipe.execute()
        except Exception as exc:  # redis-py raises ConnectionError, TimeoutError, ResponseError...
            self._down_until = time.monotonic() + REDIS_BACKOFF_SECONDS
            logger.warning("Rate limits not enforced for %ss: Redis failed (%r)", REDIS_BACKOFF_SECONDS, exc)
            return None
        return int(count)

    def counts(self, tenant_id: int, window: int) -> dict[str, int]:
        try:
            raw = self._client.hgetall(self._key(tenant_id, window))
        except Exception as exc:
            logger.warning("Could not read request counts from Redis: %r", exc)
            return {}
        return {who.decode(): int(count) for who, count in raw.items()}


_counters = None
_counters_lock = threading.Lock()


def counters() -> MemoryCounters | RedisCounters:
    global _counters
    with _counters_lock:
        if _counters is None:
            _counters = RedisCounters(settings.REDIS_URL) if settings.REDIS_URL else MemoryCounters()
        return _counters


def rate_key(caller: Caller, source: str) -> str:
    """Who a request counts against: its principal, or its source address when anonymous."""
    return f"ip:{source or 'unknown'}" if caller.principal == "anonymous" else caller.principal


def running_turns(tenant: Tenant) -> int:
    return Message.objects.filter(tenant=tenant, turn__in=OPEN_TURNS).count()


def _needs_check(tenant: Tenant) -> bool:
    return bool(tenant.rate_limit_per_minute)


def _stored_send(caller: Caller, idempotency_key: str) -> bool:
    """Whether this send repeats one stored under its Idempotency-Key (its answer lost, say).

    Such a send is answered with the task it stored, whatever the count: its
    transaction finds the key before quota_turn_claim counts.
    """
    if not idempotency_key:
        return False
    return IdempotencyKey.objects.filter(
        agent=caller.agent, caller=caller.principal, key=idempotency_key
    ).exists()


def quota_check(caller: Caller, method: str, source: str = "") -> None:
    """Raise QuotaExceeded if the request `method` of `caller` from address `source` is over its rate.

    Counts the request against the caller's rate. Synchronous (Redis); async
    code calls quota_admit. The running-turns limit is a send's own to judge,
    once its request is read (quota_turns_early, quota_turn_claim).
    """
    tenant = caller.tenant
    limit = tenant.rate_limit_per_minute
    if limit:
        now = time.time()
        count = counters().hit(tenant.pk, rate_key(caller, source), _window(now))
        if count is not None and count > limit:
            metrics.quota_refused(QuotaExceeded.RATE)
            raise QuotaExceeded(
                f"Rate limit exceeded: at most {limit} requests per minute; retry after the minute ends",
                reason=QuotaExceeded.RATE,
                retry_after=WINDOW_SECONDS - now % WINDOW_SECONDS,
                limit=limit,
            )


def quota_turns_early(caller: Caller, idempotency_key: str = "") -> None:
    """Refuse a send that would start a new task at a tenant that runs max_running_turns turns.

    Unlocked, so only early: before the send opens a transaction, where it
    would queue on the tenant's row with a database thread held;
    quota_turn_claim decides, in that transaction. Called once the request
    was checked, so a request that could never be stored hears why, not "retry
    later". A send stored already under its Idempotency-Key goes on, to be
    answered with its task. A follow-up's own checks (its task's state) come
    first in the transaction, so it is left to quota_turn_claim.
    """
    most = caller.tenant.max_running_turns
    if most and running_turns(caller.tenant) >= most and not _stored_send(caller, idempotency_key):
        _refuse_turn(most)


def quota_turn_claim(tenant: Tenant) -> None:
    """Raise QuotaExceeded if the tenant already runs max_running_turns turns; inside the send's transaction.

    Locks the tenant's row until that transaction ends, then counts: a
    concurrent send of the tenant waits here until this one has committed its
    message (or rolled back) and then counts it. FOR NO KEY UPDATE, so the rows
    other transactions insert for the tenant (whose foreign keys take a key
    share lock on it) do not wait. A tenant without the limit costs no query.
    """
    if not tenant.max_running_turns:
        return
    # The limit as it is now, read with the lock; the count in a statement of its own after it:
    # on PostgreSQL (read committed) only a statement begun after the lock sees what the sends
    # before this one committed. SQLite runs one writing transaction at a time anyway.
    locked = Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk)
    most = locked.values_list("max_running_turns", flat=True).first()
    if most and running_turns(tenant) >= most:
        _refuse_turn(most)


def _refuse_turn(most: int):
    metrics.quota_refused(QuotaExceeded.RUNNING_TURNS)
    raise QuotaExceeded(
        f"Too many running turns: this tenant runs at most {most} at once; retry when one ends",
        reason=QuotaExceeded.RUNNING_TURNS,
        retry_after=RUNNING_TURNS_RETRY_AFTER,
        limit=most,
    )


async def quota_admit(caller: Caller, method: str, source: str = "") -> None:
    """The bindings' entry point: quota_check, without a thread hop for a tenant with no rate."""
    if _needs_check(caller.tenant):
        await db(quota_check, caller, method, source)


@dataclass
class QuotaUsage:
    """A tenant's limits with what it uses now, for the dashboard and the management API."""

    max_running_turns: int | None
    running_turns: int
    rate_limit_per_minute: int | None
    # Requests this minute, in all and by the busiest callers (counted only while a limit is set).
    requests_this_minute: int = 0
    busiest: list[tuple[str, int]] = field(default_factory=list)


def quota_usage(tenant: Tenant, busiest: int = 5) -> QuotaUsage:
    counts = counters().counts(tenant.pk, _window(time.time())) if tenant.rate_limit_per_minute else {}
    return QuotaUsage(
        max_running_turns=tenant.max_running_turns,
        running_turns=running_turns(tenant),
        rate_limit_per_minute=tenant.rate_limit_per_minute,
        requests_this_minute=sum(counts.values()),
        busiest=Counter(counts).most_common(busiest),
    )
