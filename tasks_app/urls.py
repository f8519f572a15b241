from django.urls import path, re_path

from agents.views import agent_card, not_found, tenant_catalog, tenant_without_slash
from tasks_app.protocol.jsonrpc import jsonrpc_endpoint
from tasks_app.protocol.rest import rest_endpoint

# Any segment, as Django's <str:>: a name no agent can have (ech.o, a space) reaches the view
# and gets its binding's "no agent" answer, the same as a name no agent has, never Django's HTML 404.
AGENT = r"(?P<tenant>[^/]+)/(?P<agent>[^/]+)"

urlpatterns = [
    path("<str:tenant>/", tenant_catalog, name="catalog"),
    path("<str:tenant>", tenant_without_slash, name="catalog-no-slash"),
    path("<str:tenant>/<str:agent>/", jsonrpc_endpoint, name="jsonrpc"),
    # The same without its slash, as a client that trims URLs sends it (a redirect drops a POST's body).
    path("<str:tenant>/<str:agent>", jsonrpc_endpoint, name="jsonrpc-no-slash"),
    path("<str:tenant>/<str:agent>/.well-known/agent-card.json", agent_card, name="agent-card"),
    path("<str:tenant>/<str:agent>/.well-known/agent.json", agent_card, name="agent-card-legacy"),
    # [\s\S], not ".": a percent-encoded newline in an id still reaches the binding and its JSON errors;
    # and the rest is optional: so does an empty path, and the binding's URL without its slash.
    re_path(rf"^{AGENT}/rest(?:/(?P<rest>[\s\S]*))?$", rest_endpoint, name="rest"),
    # Anything else under /a2a/: a JSON 404.
    re_path(r"^(?:[\s\S]*/[\s\S]*)?$", not_found, name="not-found"),
]
