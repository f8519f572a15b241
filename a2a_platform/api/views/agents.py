from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.response import Response

from a2a_platform.api.access import PUBLISH_SCOPE
from a2a_platform.api.serializers import (
    AgentCardOutput,
    AgentCreateInput,
    AgentImportInput,
    AgentOutput,
    AgentUpdateInput,
)
from a2a_platform.api.views.base import TenantView
from agents.access import get_agent_for_tenant
from agents.cards import card_dict, public_base_url
from agents.models import Agent
from agents.services import agent_delete, agent_import, agent_register, agent_update


class AgentView(TenantView):
    def check_visibility(self, visibility: str | None, current: str | None) -> None:
        """Who may open an agent to anonymous callers (or close it): a person, or a program with the scope.

        The service audits every change of visibility; this decides who may make one.
        """
        if visibility is None or visibility == current or self.admin.may_publish:
            return
        raise PermissionDenied(
            f"Changing an agent's visibility needs a person or a token with the '{PUBLISH_SCOPE}' scope"
        )

    def shown(self, agent: Agent) -> dict:
        """The agent as this reader sees it: its config's secrets only for one who may edit it."""
        return AgentOutput(agent, context=self.output_context()).data

    def output_context(self) -> dict:
        return {"may_edit": self.admin.has_role(self.write_role)}

    def get_agent(self, slug: str) -> Agent:
        agent = get_agent_for_tenant(self.admin.tenant, slug)
        if agent is None:
            raise NotFound()
        return agent


class AgentListView(AgentView):
    @extend_schema(responses=AgentOutput(many=True), summary="List agents")
    def get(self, request, tenant):
        agents = Agent.objects.select_related("tenant").filter(tenant=self.admin.tenant).order_by("slug")
        return self.paginated(agents, AgentOutput, self.output_context())

    @extend_schema(request=AgentCreateInput, responses={201: AgentOutput}, summary="Register an agent")
    def post(self, request, tenant):
        data = AgentCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        # A new agent is public unless it says otherwise: registering a public one is opening it.
        self.check_visibility(
            data.validated_data.get("visibility", Agent.Visibility.PUBLIC), Agent.Visibility.AUTHENTICATED
        )
        agent = agent_register(tenant=self.admin.tenant, actor=self.admin.actor, **data.validated_data)
        return Response(self.shown(agent), status=status.HTTP_201_CREATED)


class AgentImportView(AgentView):
    @extend_schema(
        request=AgentImportInput,
        responses={201: AgentOutput},
        summary="Import a remote A2A agent from its card: an a2a_proxy agent that fronts it",
    )
    def post(self, request, tenant):
        data = AgentImportInput(data=request.data)
        data.is_valid(raise_exception=True)
        # Importing as a public agent opens it, as registering one does.
        self.check_visibility(data.validated_data["visibility"], Agent.Visibility.AUTHENTICATED)
        agent = agent_import(tenant=self.admin.tenant, actor=self.admin.actor, **data.validated_data)
        return Response(self.shown(agent), status=status.HTTP_201_CREATED)


class AgentDetailView(AgentView):
    @extend_schema(responses=AgentOutput, summary="One agent")
    def get(self, request, tenant, agent):
        return Response(self.shown(self.get_agent(agent)))

    @extend_schema(request=AgentUpdateInput, responses=AgentOutput, summary="Change an agent")
    def patch(self, request, tenant, agent):
        found = self.get_agent(agent)
        data = AgentUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        self.check_visibility(data.validated_data.get("visibility"), found.visibility)
        updated = agent_update(agent=found, actor=self.admin.actor, **data.validated_data)
        return Response(self.shown(updated))

    @extend_schema(responses={204: None}, summary="Delete an agent and its tasks")
    def delete(self, request, tenant, agent):
        agent_delete(agent=self.get_agent(agent), actor=self.admin.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AgentEnableView(AgentView):
    enabled = True

    @extend_schema(request=None, responses=AgentOutput, summary="Serve the agent")
    def post(self, request, tenant, agent):
        updated = agent_update(agent=self.get_agent(agent), actor=self.admin.actor, enabled=self.enabled)
        return Response(self.shown(updated))


class AgentDisableView(AgentEnableView):
    enabled = False

    @extend_schema(request=None, responses=AgentOutput, summary="Stop serving the agent (404 on its URLs)")
    def post(self, request, tenant, agent):
        return super().post(request, tenant, agent)


class AgentCardView(AgentView):
    @extend_schema(responses=AgentCardOutput, summary="Preview the agent's public and extended cards")
    def get(self, request, tenant, agent):
        found = self.get_agent(agent)
        base_url = public_base_url(request)
        extended = None if found.is_public else card_dict(found, base_url, extended=True)
        return Response(AgentCardOutput({"public": card_dict(found, base_url), "extended": extended}).data)
