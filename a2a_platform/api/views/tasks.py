from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from a2a_platform.api.serializers import TaskAnswerInput, TaskDetailOutput, TaskListQuery, TaskOutput
from a2a_platform.api.views.base import Conflict, TenantView
from a2a_platform.tenants.access import get_task_for_tenant
from a2a_platform.tenants.models import Membership
from tasks_app.models import Task, TaskState
from tasks_app.operator import operator_answer, operator_authorize, operator_cancel
from tasks_app.services import task_snapshot


class TaskView(TenantView):
    # Operators act on tasks; each action is theirs, by name, in the audit log.
    write_role = Membership.Role.OPERATOR
    person_required = True

    def get_task(self, task_id: str) -> Task:
        task = get_task_for_tenant(self.admin.tenant, task_id)
        if task is None:
            raise NotFound()
        return task

    def detail(self, task: Task) -> Response:
        task.refresh_from_db()
        return Response(TaskDetailOutput({**_row(task), "task": task_snapshot(task.pk)}).data)

    def require_state(self, task: Task, state: str) -> None:
        if task.state != state:
            raise Conflict(f"The task is {task.state}, not {state}")


def _row(task: Task) -> dict:
    return {name: getattr(task, name) for name in ("id", "agent", "context", "state", "owner")} | {
        "status_timestamp": task.status_timestamp,
        "created_at": task.created_at,
    }


class TaskListView(TaskView):
    @extend_schema(
        parameters=[TaskListQuery], responses=TaskOutput(many=True), summary="List the tenant's tasks"
    )
    def get(self, request, tenant):
        query = TaskListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = query.validated_data
        tasks = Task.objects.select_related("agent", "context").filter(tenant=self.admin.tenant)
        if "state" in filters:
            tasks = tasks.filter(state=filters["state"])
        if "agent" in filters:
            tasks = tasks.filter(agent__slug=filters["agent"])
        if "context_id" in filters:
            tasks = tasks.filter(context__context_id=filters["context_id"])
        if "owner" in filters:
            tasks = tasks.filter(owner=filters["owner"])
        if "updated_after" in filters:
            tasks = tasks.filter(updated_at__gt=filters["updated_after"])
        return self.paginated(tasks.order_by("-status_timestamp", "-pk"), TaskOutput)


class TaskDetailView(TaskView):
    @extend_schema(responses=TaskDetailOutput, summary="One task with its A2A representation")
    def get(self, request, tenant, task_id):
        return self.detail(self.get_task(task_id))


class TaskCancelView(TaskView):
    @extend_schema(request=None, responses={200: TaskDetailOutput, 409: None}, summary="Cancel a task")
    def post(self, request, tenant, task_id):
        task = self.get_task(task_id)
        operator_cancel(task, self.admin.user)
        return self.detail(task)


class TaskAnswerView(TaskView):
    @extend_schema(
        request=TaskAnswerInput,
        responses={200: TaskDetailOutput, 409: None},
        summary="Answer an input-required task",
    )
    def post(self, request, tenant, task_id):
        task = self.get_task(task_id)
        data = TaskAnswerInput(data=request.data)
        data.is_valid(raise_exception=True)
        self.require_state(task, TaskState.INPUT_REQUIRED)
        operator_answer(task, self.admin.user, data.validated_data["text"])
        return self.detail(task)


class TaskGrantView(TaskView):
    granted = True

    @extend_schema(
        request=None, responses={200: TaskDetailOutput, 409: None}, summary="Grant an auth-required task"
    )
    def post(self, request, tenant, task_id):
        task = self.get_task(task_id)
        self.require_state(task, TaskState.AUTH_REQUIRED)
        operator_authorize(task, self.admin.user, granted=self.granted)
        return self.detail(task)


class TaskDenyView(TaskGrantView):
    granted = False

    @extend_schema(
        request=None, responses={200: TaskDetailOutput, 409: None}, summary="Deny an auth-required task"
    )
    def post(self, request, tenant, task_id):
        return super().post(request, tenant, task_id)
