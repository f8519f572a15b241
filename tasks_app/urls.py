from django.urls import path

from agents.views import agent_card
from tasks_app.protocol.jsonrpc import jsonrpc_endpoint

urlpatterns = [
    path("<slug:tenant>/<slug:agent>/", jsonrpc_endpoint, name="jsonrpc"),
    path("<slug:tenant>/<slug:agent>/.well-known/agent-card.json", agent_card, name="agent-card"),
    path("<slug:tenant>/<slug:agent>/.well-known/agent.json", agent_card, name="agent-card-legacy"),
]
