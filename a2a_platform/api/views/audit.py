from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from a2a_platform.api.serializers import AuditEventOutput
from a2a_platform.api.views.base import TenantView
from tenants.models import AuditEvent, Membership


class AuditListQuery(serializers.Serializer):
    action = serializers.CharField(max_length=64, required=False)
    target_type = serializers.CharField(max_length=64, required=False)
    target_id = serializers.CharField(max_length=255, required=False)


class AuditListView(TenantView):
    read_role = Membership.Role.OWNER

    @extend_schema(
        parameters=[AuditListQuery], responses=AuditEventOutput(many=True), summary="Read the audit log"
    )
    def get(self, request, tenant) -> Response:
        query = AuditListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        events = AuditEvent.objects.filter(tenant=self.admin.tenant, **query.validated_data)
        return self.paginated(events.order_by("-created_at", "-pk"), AuditEventOutput)
