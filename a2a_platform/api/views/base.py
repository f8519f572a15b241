"""What every tenant endpoint shares: who is acting, which role it needs, how errors look."""

from a2a.utils.errors import A2AError
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import SAFE_METHODS

from a2a_platform.api.access import MANAGE_SCOPE, Admin, IsAuthenticatedPrincipal, admin_resolve
from tasks_app.db import UNAVAILABLE_ERRORS
from tasks_app.operator import NotAnApprover, TaskConflict
from tasks_app.protocol.errors import RETRY_AFTER_SECONDS, store_unavailable
from tenants.models import Membership


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The object is not in a state that allows this"
    default_code = "conflict"


class Unavailable(APIException):
    """The task store (database) could not be reached: the detail says what was, may be or was not stored."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "store_unavailable"


class Pages(LimitOffsetPagination):
    default_limit = 50
    max_limit = 200


class TenantView(GenericAPIView):
    """An endpoint under /api/v1/tenants/<tenant>/, acting as `self.admin`."""

    permission_classes = [IsAuthenticatedPrincipal]
    pagination_class = Pages
    # DRF's OPTIONS description needs one serializer per view; ours has one per method. 405 instead.
    metadata_class = None
    read_role = Membership.Role.VIEWER
    write_role = Membership.Role.OWNER
    # Writes that must be traceable to a person: credentials, members, operator actions.
    person_required = False
    # A token needs one of these scopes here (sessions are judged by role alone).
    token_scopes: tuple[str, ...] = (MANAGE_SCOPE,)
    admin: Admin

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.admin = admin_resolve(request, kwargs["tenant"], self.token_scopes)
        writing = request.method not in SAFE_METHODS
        needed = self.write_role if writing else self.read_role
        if not self.admin.has_role(needed):
            raise PermissionDenied(f"This needs the {needed} role in tenant '{self.admin.tenant.slug}'")
        if writing and self.person_required and self.admin.user is None:
            raise PermissionDenied("This needs a person's credentials (a session or an interactive token)")

    def handle_exception(self, exc):
        # Services speak Django, A2A and the operator's TaskConflict; the API answers 400 and 409.
        if isinstance(exc, DjangoValidationError):
            exc = ValidationError(
                exc.message_dict if hasattr(exc, "message_dict") else {"detail": exc.messages}
            )
        elif isinstance(exc, A2AError):
            exc = Conflict(exc.message)
        elif isinstance(exc, TaskConflict):
            exc = Conflict(str(exc))
        elif isinstance(exc, NotAnApprover):
            exc = PermissionDenied(str(exc))
        elif isinstance(exc, UNAVAILABLE_ERRORS):
            exc = Unavailable(store_unavailable(exc).message)
        response = super().handle_exception(exc)
        if isinstance(exc, Unavailable):
            response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response

    def paginated(self, queryset, serializer_class, context: dict | None = None):
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(serializer_class(page, many=True, context=context or {}).data)
