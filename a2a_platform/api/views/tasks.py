from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.response import Response

from a2a_platform.api.access import TASKS_ACT_SCOPE, TASKS_READ_SCOPE
from a2a_platform.api.serializers import (
    TaskAnswerInput,
    TaskDecisionInput,
    TaskDetailOutput,
    TaskListQuery,
    TaskOutput,
)
from a2a_platform.api.views.base import TenantView, Unavailable
from agents.approvals import APPROVE_SCOPE
from tasks_app.access import get_task_for_tenant
from tasks_app.db import UNAVAILABLE_ERRORS
from tasks_app.models import Task
from tasks_app.operator import operator_answer, operator_authorize, operator_cancel
from tasks_app.selectors import task_snapshot, tasks_matching, tenant_tasks
from tenants.models import Membership


class TaskView(TenantView):
    # Operators act on tasks; each action is theirs, by name, in the audit log.
    write_role = Membership.Role.OPERATOR
    person_required = True
    # Task content is the tenant's callers' data: agents:manage alone does not read it.
    token_scopes = (TASKS_READ_SCOPE,)

    def get_task(self, task_id: str) -> Task:
        task = get_task_for_tenant(self.admin.tenant, task_id)
        if task is None:
            raise NotFound()
        return task

    def detail(self, task: Task) -> Response:
        task.refresh_from_db()
        return Response(TaskDetailOutput({**_row(task), "task": task_snapshot(task.pk)}).data)

    def needs_scope(self, scope: str, doing: str) -> None:
        """A person's token acts on a task only with `scope`: one given to read cannot act in their name."""
        if self.admin.scopes is not None and scope not in self.admin.scopes:
            raise PermissionDenied(f"{doing} needs a token with '{scope}'")

    def acted(self, task: Task) -> Response:
        """The task after an operator's action, which is stored: never answered "nothing was stored"."""
        try:
            return self.detail(task)
        except UNAVAILABLE_ERRORS:
            raise Unavailable(ACTION_STORED) from None


# An operator's action stored, and the task store gone before the task could be read back.
ACTION_STORED = (
    "The action was stored; only reading the task back failed: the task store (database) is "
    "unavailable. Read the task once it is back; do not send the action again."
)


def _row(task: Task) -> dict:
    return {name: getattr(task, name) for name in ("id", "agent", "context", "state", "owner")} | {
        "status_timestamp": task.status_timestamp,
        "created_at": task.created_at,
        "event_seq": task.event_seq,
    }


class TaskListView(TaskView):
    @extend_schema(
        parameters=[TaskListQuery], responses=TaskOutput(many=True), summary="List the tenant's tasks"
    )
    def get(self, request, tenant):
        query = TaskListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        tasks = tasks_matching(tenant_tasks(self.admin.tenant), **query.validated_data)
        return self.paginated(tasks.order_by("-status_timestamp", "-pk"), TaskOutput)


class TaskDetailView(TaskView):
    @extend_schema(responses=TaskDetailOutput, summary="One task with its A2A representation")
    def get(self, request, tenant, task_id):
        return self.detail(self.get_task(task_id))


class TaskCancelView(TaskView):
    @extend_schema(request=None, responses={200: TaskDetailOutput, 409: None}, summary="Cancel a task")
    def post(self, request, tenant, task_id):
        task = self.get_task(task_id)  # first: another tenant's task is missing, whatever the token
        self.needs_scope(TASKS_ACT_SCOPE, "Canceling a task")
        operator_cancel(task, self.admin.user)
        return self.acted(task)


class TaskAnswerView(TaskView):
    @extend_schema(
        request=TaskAnswerInput,
        responses={200: TaskDetailOutput, 409: None},
        summary="Answer an input-required task",
    )
    def post(self, request, tenant, task_id):
        task = self.get_task(task_id)
        self.needs_scope(TASKS_ACT_SCOPE, "Answering a task")
        data = TaskAnswerInput(data=request.data)
        data.is_valid(raise_exception=True)
        operator_answer(
            task, self.admin.user, data.validated_data["text"], seen=data.validated_data.get("event_seq")
        )
        return self.acted(task)


class TaskGrantView(TaskView):
    granted = True

    @extend_schema(
        request=TaskDecisionInput,
        responses={200: TaskDetailOutput, 409: None},
        summary="Grant an auth-required task",
    )
    def post(self, request, tenant, task_id):
        task = self.get_task(task_id)  # first: another tenant's task is missing, whatever the token
        # As over A2A: a person's token decides only with the scope (and the role) for it.
        self.needs_scope(APPROVE_SCOPE, "Deciding an auth-required task")
        data = TaskDecisionInput(data=request.data)
        data.is_valid(raise_exception=True)
        operator_authorize(
            task, self.admin.user, granted=self.granted, seen=data.validated_data.get("event_seq")
        )
        return self.acted(task)


class TaskDenyView(TaskGrantView):
    granted = False

    @extend_schema(
        request=TaskDecisionInput,
        responses={200: TaskDetailOutput, 409: None},
        summary="Deny an auth-required task",
    )
    def post(self, request, tenant, task_id):
        return super().post(request, tenant, task_id)
