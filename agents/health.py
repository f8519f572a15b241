"""Can an agent serve calls? The check behind the console's "Serving calls" / "Can't serve".

Three checks, in order: its handler is installed and loads; its config fits the
handler's schema and rules (the same validation as every write path); and the
handler's own readiness check, if it has one (a2a_proxy: the remote card is
fetched, within 2 s). The last may use the network, so a result is cached for
HEALTH_TTL seconds per agent and per version of its row (an edit starts
afresh), and the list page checks the agents it has no result for in
parallel. "Check now" passes fresh=True. A check whose host lookups were
refused because too many were waiting (outbound's shares) is not cached: the
next look checks again.
"""

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from django.core.cache import cache
from django.utils import timezone

from agents.outbound import deadline, lookups_for, noting_crowded
from agents.registry import (
    ConfigInvalid,
    HandlerNotAvailable,
    handler_check_ready,
    load_handler,
    validate_handler_config,
)

logger = logging.getLogger(__name__)

HEALTH_TTL = 60
# Agents checked at once by agents_health().
PARALLEL_CHECKS = 8
# A check's host lookups (its config's URLs, then the readiness check's) end within this, together.
CHECK_TIMEOUT = 2.0


@dataclass(frozen=True)
class AgentHealth:
    ok: bool
    # Why the agent cannot serve, a sentence for the console; "" when it can.
    reason: str
    checked_at: datetime
    # Refused for want of room for its DNS lookups: the platform was busy, not the agent. Not cached.
    busy: bool = False


def _key(agent) -> str:
    return f"agent-health:{agent.pk}:{agent.updated_at.timestamp() if agent.updated_at else 0}"


def agent_health(agent, *, fresh: bool = False) -> AgentHealth:
    """The agent's health: the cached result unless `fresh`, else a new check (cached after)."""
    if not fresh:
        cached = cache.get(_key(agent))
        if cached is not None:
            return cached
    health = _check(agent)
    if not health.busy:
        cache.set(_key(agent), health, HEALTH_TTL)
    return health


def agents_health(agents) -> dict[int, AgentHealth]:
    """agent pk -> health for many agents; the ones not cached are checked in parallel."""
    agents = list(agents)
    found = cache.get_many([_key(agent) for agent in agents])
    result = {agent.pk: found[_key(agent)] for agent in agents if _key(agent) in found}
    missing = [agent for agent in agents if agent.pk not in result]
    if missing:
        with ThreadPoolExecutor(max_workers=min(PARALLEL_CHECKS, len(missing))) as pool:
            for agent, health in zip(missing, pool.map(_check, missing), strict=True):
                result[agent.pk] = health
        lasting = {_key(agent): result[agent.pk] for agent in missing if not result[agent.pk].busy}
        cache.set_many(lasting, HEALTH_TTL)
    return result


def _refused(reason: str) -> AgentHealth:
    return AgentHealth(ok=False, reason=reason, checked_at=timezone.now())


def _check(agent) -> AgentHealth:
    try:
        load_handler(agent.handler)
    except HandlerNotAvailable as exc:
        return _refused(f"Its handler is missing: {exc}.")
    with deadline(CHECK_TIMEOUT), lookups_for(agent.tenant_id), noting_crowded() as crowded:
        health = _checked(agent)
    if crowded and not health.ok:
        # Not the agent's fault, whichever step it failed: its config is not "invalid".
        reason = (
            f"It could not be checked now: too many lookups are waiting on DNS ({crowded[0]} was not "
            "looked up). It is checked again at the next look."
        )
        return dataclasses.replace(health, reason=reason, busy=True)
    return health


def _checked(agent) -> AgentHealth:
    try:
        validate_handler_config(agent.handler, agent.config)
    except ConfigInvalid as exc:
        return _refused(f"Its config is invalid: {exc}")
    try:
        handler_check_ready(agent.handler, agent.config)
    except (ConfigInvalid, ValueError, OSError) as exc:
        text = str(exc)
        return _refused(f"{text[:1].upper()}{text[1:]}")
    except Exception as exc:  # a handler's own check must not break the page
        logger.exception("Readiness check of agent %s failed", agent.pk)
        return _refused(f"Its handler's readiness check failed: {exc.__class__.__name__}: {exc}")
    return AgentHealth(ok=True, reason="", checked_at=timezone.now())
