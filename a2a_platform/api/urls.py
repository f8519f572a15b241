from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from a2a_platform.api.views import agents, audit, clients, members, tasks, tenants
from a2a_platform.api.views.docs import docs_asset

app_name = "api"

tenant_patterns = [
    path("", tenants.TenantDetailView.as_view(), name="tenant"),
    path("handlers/", tenants.HandlerListView.as_view(), name="handlers"),
    path("agents/", agents.AgentListView.as_view(), name="agents"),
    path("agents/import/", agents.AgentImportView.as_view(), name="agent-import"),
    path("agents/<slug:agent>/", agents.AgentDetailView.as_view(), name="agent"),
    path("agents/<slug:agent>/enable/", agents.AgentEnableView.as_view(), name="agent-enable"),
    path("agents/<slug:agent>/disable/", agents.AgentDisableView.as_view(), name="agent-disable"),
    path("agents/<slug:agent>/card/", agents.AgentCardView.as_view(), name="agent-card"),
    path("clients/", clients.ClientListView.as_view(), name="clients"),
    path("clients/<str:client_id>/", clients.ClientDetailView.as_view(), name="client"),
    path("clients/<str:client_id>/revoke/", clients.ClientRevokeView.as_view(), name="client-revoke"),
    path("tasks/", tasks.TaskListView.as_view(), name="tasks"),
    path("tasks/<str:task_id>/", tasks.TaskDetailView.as_view(), name="task"),
    path("tasks/<str:task_id>/cancel/", tasks.TaskCancelView.as_view(), name="task-cancel"),
    path("tasks/<str:task_id>/answer/", tasks.TaskAnswerView.as_view(), name="task-answer"),
    path("tasks/<str:task_id>/grant/", tasks.TaskGrantView.as_view(), name="task-grant"),
    path("tasks/<str:task_id>/deny/", tasks.TaskDenyView.as_view(), name="task-deny"),
    path("members/", members.MemberListView.as_view(), name="members"),
    path("members/<str:username>/", members.MemberDetailView.as_view(), name="member"),
    path("audit/", audit.AuditListView.as_view(), name="audit"),
]

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    path("docs/assets/<path:path>", docs_asset, name="docs-asset"),
    path("v1/tenants/", tenants.TenantListView.as_view(), name="tenants"),
    path("v1/tenants/<slug:tenant>/", include(tenant_patterns)),
]
