from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response

from a2a_platform.api.serializers import MemberAddInput, MemberOutput, MemberUpdateInput
from a2a_platform.api.views.base import TenantView
from tenants.access import get_membership_for_tenant
from tenants.models import Membership
from tenants.services import membership_remove, membership_set


class MemberView(TenantView):
    person_required = True

    def get_membership(self, username: str) -> Membership:
        membership = get_membership_for_tenant(self.admin.tenant, username)
        if membership is None:
            raise NotFound()
        return membership


class MemberListView(MemberView):
    @extend_schema(responses=MemberOutput(many=True), summary="List members")
    def get(self, request, tenant):
        members = Membership.objects.select_related("user").filter(tenant=self.admin.tenant)
        return self.paginated(members.order_by("user__username"), MemberOutput)

    @extend_schema(request=MemberAddInput, responses={201: MemberOutput}, summary="Add an existing user")
    def post(self, request, tenant):
        data = MemberAddInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        user = get_user_model().objects.filter(username=values["username"], is_active=True).first()
        if user is None:
            raise ValidationError({"username": ["No active user with this username"]})
        if get_membership_for_tenant(self.admin.tenant, user.username) is not None:
            raise ValidationError({"username": ["Already a member; change the role instead"]})
        membership = membership_set(
            tenant=self.admin.tenant, user=user, role=values["role"], actor=self.admin.actor
        )
        return Response(MemberOutput(membership).data, status=status.HTTP_201_CREATED)


class MemberDetailView(MemberView):
    @extend_schema(responses=MemberOutput, summary="One member")
    def get(self, request, tenant, username):
        return Response(MemberOutput(self.get_membership(username)).data)

    @extend_schema(request=MemberUpdateInput, responses=MemberOutput, summary="Change a member's role")
    def patch(self, request, tenant, username):
        membership = self.get_membership(username)
        data = MemberUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        updated = membership_set(
            tenant=self.admin.tenant,
            user=membership.user,
            role=data.validated_data["role"],
            actor=self.admin.actor,
        )
        return Response(MemberOutput(updated).data)

    @extend_schema(responses={204: None}, summary="Remove a member")
    def delete(self, request, tenant, username):
        membership_remove(membership=self.get_membership(username), actor=self.admin.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)
