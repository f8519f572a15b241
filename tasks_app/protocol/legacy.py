"""Older A2A dialects (0.3 and the 0.1 draft) on the JSON-RPC endpoint."""

from django.http import JsonResponse

LEGACY_METHODS: frozenset[str] = frozenset()


async def dispatch(request, body: dict, agent, request_id) -> JsonResponse:
    raise NotImplementedError
