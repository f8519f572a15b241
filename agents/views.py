from asgiref.sync import sync_to_async
from django.http import HttpResponsePermanentRedirect, JsonResponse
from django.utils.cache import get_conditional_response
from django.views.decorators.csrf import csrf_exempt

from agents.access import get_enabled_agent
from agents.cards import card_cache_headers, card_dict, card_last_modified, card_version, public_base_url
from agents.models import Agent
from tenants.access import usable_id

# Cards are only ever read: nothing here takes a write, so no CSRF check either
# (it would answer a stray POST with an HTML 403 instead of this 405).
READ_METHODS = ("GET", "HEAD")


def _method_not_allowed(request) -> JsonResponse | None:
    if request.method in READ_METHODS:
        return None
    response = JsonResponse({"error": f"{request.method} is not allowed here; read it with GET"}, status=405)
    response["Allow"] = ", ".join(READ_METHODS)
    return response


def _version_not_supported() -> JsonResponse:
    return JsonResponse(
        {"error": "This A2A-Version is not supported; cards are served for 1.0 and 0.3 (no version)"},
        status=400,
    )


def _card_response(request, tenant: str, agent: str):
    version = card_version(request)
    if version is None:
        return _version_not_supported()
    found = get_enabled_agent(tenant, agent)
    if found is None:
        return JsonResponse({"error": "No agent at this URL"}, status=404)
    card = card_dict(found, public_base_url(request), version=version)
    # The card depends on A2A-Version: a shared cache must keep one per version.
    headers = {**card_cache_headers(card, found), "Vary": "A2A-Version"}
    # Django evaluates the preconditions as RFC 9110 §13.2.2 says: If-None-Match
    # by weak comparison (with or without W/, lists, *), and If-Modified-Since
    # only when there is no If-None-Match. A 304 keeps ETag, Last-Modified and
    # Cache-Control.
    return get_conditional_response(
        request,
        etag=headers["ETag"],
        last_modified=card_last_modified(found),
        response=JsonResponse(card, headers=headers),
    )


@csrf_exempt
async def agent_card(request, tenant: str, agent: str):
    refused = _method_not_allowed(request)
    if refused:
        return refused
    return await sync_to_async(_card_response)(request, tenant, agent)


def _catalog(request, tenant: str, version: str):
    if not usable_id(tenant):
        return []
    agents = Agent.objects.select_related("tenant").filter(tenant__slug=tenant, enabled=True).order_by("slug")
    base_url = public_base_url(request)
    # Every enabled agent's public card; authenticated agents show how to get a token.
    return [card_dict(agent, base_url, version=version) for agent in agents]


@csrf_exempt
async def not_found(request):
    """Any other URL under /a2a/: a JSON 404 on every method, whoever's tenant or agent it names."""
    return JsonResponse({"error": "Nothing at this URL"}, status=404)


@csrf_exempt
async def tenant_without_slash(request, tenant: str):
    """`/a2a/<tenant>`: a browser's GET goes on to the catalog; any other method is the JSON 404.

    A redirect would have a client resend its POST as a GET without the body, and
    Django's own 404 for it is an HTML page.
    """
    if request.method not in ("GET", "HEAD"):
        return await not_found(request)
    return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))


@csrf_exempt
async def tenant_catalog(request, tenant: str):
    refused = _method_not_allowed(request)
    if refused:
        return refused
    version = card_version(request)
    if version is None:
        return _version_not_supported()
    cards = await sync_to_async(_catalog)(request, tenant, version)
    if not cards:
        return JsonResponse({"error": "No agents at this URL"}, status=404)
    return JsonResponse({"agents": cards}, headers={"Vary": "A2A-Version"})
