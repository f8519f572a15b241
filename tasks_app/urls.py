from django.urls import path, re_path

from agents.views import agent_card, tenant_catalog
from tasks_app.protocol.jsonrpc import jsonrpc_endpoint
from tasks_app.protocol.rest import rest_endpoint

# As Django's <slug:> of the JSON-RPC route: a name no agent has gets the binding's JSON 404 on both.
AGENT = r"(?P<tenant>[-a-zA-Z0-9_]+)/(?P<agent>[-a-zA-Z0-9_]+)"

urlpatterns = [
    path("<slug:tenant>/", tenant_catalog, name="catalog"),
    path("<slug:tenant>/<slug:agent>/", jsonrpc_endpoint, name="jsonrpc"),
    # The same without its slash, as a client that trims URLs sends it (a redirect drops a POST's body).
    path("<slug:tenant>/<slug:agent>", jsonrpc_endpoint, name="jsonrpc-no-slash"),
    path("<slug:tenant>/<slug:agent>/.well-known/agent-card.json", agent_card, name="agent-card"),
    path("<slug:tenant>/<slug:agent>/.well-known/agent.json", agent_card, name="agent-card-legacy"),
    # [\s\S], not ".": a percent-encoded newline in an id still reaches the binding and its JSON errors;
    # and * not +: so does an empty path.
    re_path(rf"^{AGENT}/rest/(?P<rest>[\s\S]*)$", rest_endpoint, name="rest"),
]
