from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from a2a_platform.api.serializers import OAuthClientCreatedOutput, OAuthClientCreateInput, OAuthClientOutput
from a2a_platform.api.views.base import TenantView
from tenants.access import get_oauth_client_for_tenant
from tenants.models import Application, Membership
from tenants.services import oauth_client_create, oauth_client_revoke


class ClientView(TenantView):
    # Credentials are the owner's business, and each change has a person behind it.
    read_role = Membership.Role.OWNER
    person_required = True

    def get_client(self, client_id: str) -> Application:
        client = get_oauth_client_for_tenant(self.admin.tenant, client_id)
        if client is None:
            raise NotFound()
        return client


class ClientListView(ClientView):
    @extend_schema(responses=OAuthClientOutput(many=True), summary="List OAuth2 clients")
    def get(self, request, tenant):
        clients = Application.objects.filter(tenant=self.admin.tenant).order_by("-created", "-pk")
        return self.paginated(clients, OAuthClientOutput)

    @extend_schema(
        request=OAuthClientCreateInput,
        responses={201: OAuthClientCreatedOutput},
        summary="Create an OAuth2 client; the secret is in this response only",
    )
    def post(self, request, tenant):
        data = OAuthClientCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        client, secret = oauth_client_create(
            tenant=self.admin.tenant,
            actor=self.admin.actor,
            name=values.get("name", ""),
            scopes=values.get("scopes"),
            grant=values["grant"],
            redirect_uris=" ".join(values["redirect_uris"]),
        )
        client.client_secret = secret
        return Response(OAuthClientCreatedOutput(client).data, status=status.HTTP_201_CREATED)


class ClientDetailView(ClientView):
    @extend_schema(responses=OAuthClientOutput, summary="One OAuth2 client (never its secret)")
    def get(self, request, tenant, client_id):
        return Response(OAuthClientOutput(self.get_client(client_id)).data)


class ClientRevokeView(ClientView):
    @extend_schema(request=None, responses=OAuthClientOutput, summary="Revoke a client and all its tokens")
    def post(self, request, tenant, client_id):
        client = oauth_client_revoke(client=self.get_client(client_id), actor=self.admin.actor)
        return Response(OAuthClientOutput(client).data)
