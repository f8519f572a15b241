from django.urls import path, re_path

from agents.views import agent_card, tenant_catalog
from tasks_app.protocol.jsonrpc import jsonrpc_endpoint
from tasks_app.protocol.rest import rest_endpoint

AGENT = r"(?P<tenant>[-a-z0-9]+)/(?P<agent>[-a-z0-9]+)"

urlpatterns = [
    path("<slug:tenant>/", tenant_catalog, name="catalog"),
    path("<slug:tenant>/<slug:agent>/", jsonrpc_endpoint, name="jsonrpc"),
    path("<slug:tenant>/<slug:agent>/.well-known/agent-card.json", agent_card, name="agent-card"),
    path("<slug:tenant>/<slug:agent>/.well-known/agent.json", agent_card, name="agent-card-legacy"),
    # [\s\S], not ".": a percent-encoded newline in an id still reaches the binding and its JSON errors.
    re_path(rf"^{AGENT}/rest/(?P<rest>[\s\S]+)$", rest_endpoint, name="rest"),
]
