from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from a2a_platform.api.access import API_SCOPES, MANAGE_SCOPE, IsAuthenticatedPrincipal, tenants_of
from a2a_platform.api.serializers import HandlerOutput, TenantDetailOutput, TenantOutput, TenantUpdateInput
from a2a_platform.api.views.base import TenantView
from agents.registry import HandlerNotAvailable, available_handlers, handler_info
from tasks_app.quotas import quota_usage
from tenants.models import LIMIT_FIELDS, Tenant
from tenants.services import tenant_settings_update


def tenant_row(tenant: Tenant, role: str) -> dict:
    return {"slug": tenant.slug, "name": tenant.name, "role": role} | {
        name: getattr(tenant, name) for name in LIMIT_FIELDS
    }


class TenantListView(GenericAPIView):
    permission_classes = [IsAuthenticatedPrincipal]

    @extend_schema(responses=TenantOutput(many=True), summary="Tenants you can manage")
    def get(self, request):
        rows = [tenant_row(t, role) for t, role in tenants_of(request)]
        return Response(TenantOutput(rows, many=True).data)


class TenantDetailView(TenantView):
    token_scopes = API_SCOPES

    def detail(self, tenant: Tenant) -> Response:
        usage = quota_usage(tenant)
        row = tenant_row(tenant, self.admin.role) | {
            "usage": {
                "running_turns": usage.running_turns,
                "requests_this_minute": usage.requests_this_minute,
            }
        }
        return Response(TenantDetailOutput(row).data)

    @extend_schema(responses=TenantDetailOutput, summary="One tenant, your role in it, its quotas and use")
    def get(self, request, tenant):
        return self.detail(self.admin.tenant)

    @extend_schema(
        request=TenantUpdateInput,
        responses=TenantDetailOutput,
        summary="Change the tenant's name, quotas or retention (owners; audited)",
    )
    def patch(self, request, tenant):
        if self.admin.scopes is not None and MANAGE_SCOPE not in self.admin.scopes:
            raise PermissionDenied(f"This needs a token with the '{MANAGE_SCOPE}' scope")
        data = TenantUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        updated = tenant_settings_update(
            tenant=self.admin.tenant, actor=self.admin.actor, **data.validated_data
        )
        return self.detail(updated)


class HandlerListView(TenantView):
    @extend_schema(responses=HandlerOutput(many=True), summary="Handler names an agent can use")
    def get(self, request, tenant):
        rows = []
        for name in sorted(available_handlers()):
            try:
                info = handler_info(name)
            except HandlerNotAvailable:
                continue  # a handler that does not load cannot be chosen either
            rows.append(
                {
                    "name": name,
                    "title": info.title,
                    "description": info.description,
                    "config_schema": info.config_schema,
                    "default_config": info.default_config,
                    "default_skills": info.default_skills,
                }
            )
        return Response(HandlerOutput(rows, many=True).data)
