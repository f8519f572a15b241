from drf_spectacular.utils import extend_schema
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from a2a_platform.api.access import IsAuthenticatedPrincipal, tenants_of
from a2a_platform.api.serializers import HandlerOutput, TenantOutput
from a2a_platform.api.views.base import TenantView
from agents.registry import HandlerNotAvailable, available_handlers, handler_info


class TenantListView(GenericAPIView):
    permission_classes = [IsAuthenticatedPrincipal]

    @extend_schema(responses=TenantOutput(many=True), summary="Tenants you can manage")
    def get(self, request):
        rows = [{"slug": t.slug, "name": t.name, "role": role} for t, role in tenants_of(request)]
        return Response(TenantOutput(rows, many=True).data)


class TenantDetailView(TenantView):
    @extend_schema(responses=TenantOutput, summary="One tenant and your role in it")
    def get(self, request, tenant):
        admin = self.admin
        return Response(
            TenantOutput({"slug": admin.tenant.slug, "name": admin.tenant.name, "role": admin.role}).data
        )


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
