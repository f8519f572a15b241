from asgiref.sync import sync_to_async
from django.http import HttpResponse, JsonResponse

from agents.access import get_enabled_agent
from agents.cards import card_cache_headers, card_dict, public_base_url
from agents.models import Agent


def _card_response(request, tenant: str, agent: str):
    found = get_enabled_agent(tenant, agent)
    if found is None:
        return JsonResponse({"error": "No agent at this URL"}, status=404)
    card = card_dict(found, public_base_url(request))
    headers = card_cache_headers(card, found)
    if request.headers.get("If-None-Match") == headers["ETag"]:
        return HttpResponse(status=304, headers=headers)
    return JsonResponse(card, headers=headers)


async def agent_card(request, tenant: str, agent: str):
    return await sync_to_async(_card_response)(request, tenant, agent)


def _catalog(request, tenant: str):
    agents = Agent.objects.select_related("tenant").filter(tenant__slug=tenant, enabled=True).order_by("slug")
    base_url = public_base_url(request)
    # Every enabled agent's public card; authenticated agents show how to get a token.
    return [card_dict(agent, base_url) for agent in agents]


async def tenant_catalog(request, tenant: str):
    cards = await sync_to_async(_catalog)(request, tenant)
    if not cards:
        return JsonResponse({"error": "No agents at this URL"}, status=404)
    return JsonResponse({"agents": cards})
