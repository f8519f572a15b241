import json
import shlex

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from a2a_platform.console.access import Role, tenant_view
from a2a_platform.console.forms import AgentForm, AgentImportForm, suggest_slug
from a2a_platform.console.views.base import actor, render_console
from agents.access import get_agent_for_tenant
from agents.cards import agent_url, card_dict, public_base_url
from agents.health import agent_health, agents_health
from agents.models import Agent
from agents.registry import config_shown
from agents.services import agent_import, agent_import_preview, agent_register, agent_update

# What the form edits and the services store: every form field but the slug (the URL).
AGENT_FORM_FIELDS = tuple(name for name in AgentForm.Meta.fields if name != "slug")


@require_GET
@tenant_view()
def agent_list(request):
    agents = list(request.console.tenant.agents.annotate(task_count=Count("tasks")).order_by("name", "pk"))
    # Cached per agent for a minute (agents/health.py): a live refresh costs no network call.
    health = agents_health(agents)
    for agent in agents:
        agent.health = health[agent.pk]
    return render_console(request, "console/agents/list.html", {"agents": agents})


def _curl_examples(agent, url: str, base_url: str) -> list[str]:
    body = {
        "jsonrpc": "2.0",
        "id": "req-1",
        "method": "SendMessage",
        "params": {"message": {"role": "ROLE_USER", "messageId": "msg-1", "parts": [{"text": "hi"}]}},
    }
    bearer = "" if agent.is_public else ' -H "Authorization: Bearer $TOKEN"'
    send = (
        f"curl -s -X POST {shlex.quote(url)} -H 'Content-Type: application/json' -H 'A2A-Version: 1.0'"
        f"{bearer} -d {shlex.quote(json.dumps(body))}"
    )
    if agent.is_public:
        return [send]
    token = (
        f'TOKEN=$(curl -s -u "$CLIENT_ID:$CLIENT_SECRET" -d grant_type=client_credentials '
        f"-d scope=a2a:invoke {shlex.quote(base_url + '/o/token/')} | python3 -c "
        "'import json,sys; print(json.load(sys.stdin)[\"access_token\"])')"
    )
    return [token, send]


@require_GET
@tenant_view()
def agent_detail(request, slug: str):
    agent = get_agent_for_tenant(request.console.tenant, slug)
    if agent is None:
        raise Http404("No such agent")
    base_url = public_base_url(request)
    url = agent_url(agent, base_url)
    try:
        card, card_error = json.dumps(card_dict(agent, base_url), indent=2, ensure_ascii=False), ""
    except Exception as exc:  # a row edited outside the console may not make a card
        card, card_error = "", str(exc)
    return render_console(
        request,
        "console/agents/detail.html",
        {
            "agent": agent,
            "endpoint": url,
            "card_url": f"{url}.well-known/agent-card.json",
            "card": card,
            "card_error": card_error,
            "curl": _curl_examples(agent, url, base_url),
            # Its secrets (writeOnly values) only for those who may edit the agent.
            "config": json.dumps(
                config_shown(agent, may_edit=request.console.allows(Role.OWNER)), indent=2, ensure_ascii=False
            ),
            "health": agent_health(agent),
        },
    )


@require_POST
@tenant_view()
def agent_check(request, slug: str):
    """ "Check now": run the agent's health check afresh (any member may; it changes nothing)."""
    agent = get_agent_for_tenant(request.console.tenant, slug)
    if agent is None:
        raise Http404("No such agent")
    health = agent_health(agent, fresh=True)
    if health.ok:
        messages.success(request, f"Checked: {agent.name} can serve calls.")
    else:
        messages.error(request, f"Checked: {agent.name} can't serve. {health.reason}")
    return redirect("console:agent", tenant=agent.tenant.slug, slug=agent.slug)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OWNER)
def agent_create(request):
    tenant = request.console.tenant
    form = AgentForm(request.POST or None, tenant=tenant)
    if request.method == "POST" and form.is_valid():
        fields = {name: form.cleaned_data[name] for name in AGENT_FORM_FIELDS}
        try:
            agent = agent_register(
                tenant=tenant, actor=actor(request), slug=form.cleaned_data["slug"], **fields
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, f"Agent {agent.name} is registered and serving.")
            return redirect("console:agent", tenant=tenant.slug, slug=agent.slug)
    return render_console(request, "console/agents/form.html", {"form": form, "creating": True})


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OWNER)
def agent_edit(request, slug: str):
    tenant = request.console.tenant
    agent = get_agent_for_tenant(tenant, slug)
    if agent is None:
        raise Http404("No such agent")
    form = AgentForm(request.POST or None, instance=agent, tenant=tenant)
    # Before the form fills the instance in: the config may come from fields the raw text never saw.
    stored = {name: getattr(agent, name) for name in AGENT_FORM_FIELDS}
    if request.method == "POST" and form.is_valid():
        changed = {
            name: form.cleaned_data[name]
            for name in AGENT_FORM_FIELDS
            if form.cleaned_data[name] != stored[name]
            or (name == "config" and json.dumps(form.cleaned_data[name]) != json.dumps(stored[name]))
        }
        try:
            agent_update(agent=agent, actor=actor(request), **changed)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, "Agent saved." if changed else "Nothing changed.")
            return redirect("console:agent", tenant=tenant.slug, slug=agent.slug)
    return render_console(request, "console/agents/form.html", {"form": form, "agent": agent})


@require_POST
@tenant_view(Role.OWNER)
def agent_toggle(request, slug: str):
    agent = get_agent_for_tenant(request.console.tenant, slug)
    if agent is None:
        raise Http404("No such agent")
    enabled = request.POST.get("enabled") == "1"
    agent_update(agent=agent, actor=actor(request), enabled=enabled)
    messages.success(request, f"Agent {'enabled' if enabled else 'disabled'}.")
    return redirect("console:agent", tenant=agent.tenant.slug, slug=agent.slug)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OWNER)
def agent_import_view(request):
    """Paste a card URL, see what the card says, confirm: an a2a_proxy agent fronts the remote one."""
    tenant = request.console.tenant
    form = AgentImportForm(request.POST or None)
    preview = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            if request.POST.get("confirm") == "1":
                agent = agent_import(
                    tenant=tenant,
                    actor=actor(request),
                    card_url=data["card_url"],
                    slug=data["slug"] or _suggested_slug(tenant, data["name"] or "remote-agent"),
                    name=data["name"],
                    visibility=data["visibility"],
                )
                messages.success(request, f"Agent {agent.name} is imported and serving.")
                return redirect("console:agent", tenant=tenant.slug, slug=agent.slug)
            preview = _import_preview(tenant, form, agent_import_preview(data["card_url"], tenant=tenant))
        except ValidationError as exc:
            _add_errors(form, exc)
    return render_console(request, "console/agents/import.html", {"form": form, "preview": preview})


def _import_preview(tenant, form, remote) -> dict:
    card = remote.data
    # Suggest a slug and name from the card; what the admin typed wins.
    if not form.cleaned_data["slug"]:
        form.data = form.data.copy()
        form.data["slug"] = _suggested_slug(tenant, card.get("name", ""))
    return {
        "name": card.get("name", ""),
        "description": card.get("description", ""),
        "version": card.get("version", ""),
        "skills": card.get("skills", []),
        "interfaces": card.get("supportedInterfaces", []),
        "jsonrpc_url": remote.jsonrpc_url,
        "secured": bool(card.get("securityRequirements")),
    }


def _suggested_slug(tenant, name: str) -> str:
    base = suggest_slug(name)[:40].strip("-") or "remote-agent"
    taken = set(Agent.objects.filter(tenant=tenant, slug__startswith=base).values_list("slug", flat=True))
    slug, number = base, 2
    while slug in taken:
        slug, number = f"{base}-{number}", number + 1
    return slug


def _add_errors(form, exc: ValidationError) -> None:
    if hasattr(exc, "error_dict"):
        for field, errors in exc.message_dict.items():
            target = field if field in form.fields else None
            for error in errors:
                form.add_error(target, error)
    else:
        form.add_error(None, exc)
