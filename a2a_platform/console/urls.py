from django.contrib.auth import views as auth_views
from django.urls import path

from a2a_platform.console.views import agents, base, clients, dashboard, settings, tasks

app_name = "console"

# Tenant pages live under t/<tenant>/ so no tenant slug can shadow login/ or assets/.
T = "t/<slug:tenant>/"

urlpatterns = [
    path("", base.console_home, name="home"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="console/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("assets/<str:name>", base.console_asset, name="asset"),
    path(T, dashboard.dashboard, name="dashboard"),
    path(T + "tasks/", tasks.task_list, name="tasks"),
    path(T + "queues/<slug:queue>/", tasks.task_queue, name="queue"),
    path(T + "tasks/<str:task_id>/", tasks.task_detail, name="task"),
    path(T + "tasks/<str:task_id>/answer", tasks.task_answer, name="task-answer"),
    path(T + "tasks/<str:task_id>/authorize", tasks.task_authorize, name="task-authorize"),
    path(T + "tasks/<str:task_id>/cancel", tasks.task_cancel, name="task-cancel"),
    path(T + "tasks/<str:task_id>/file", tasks.artifact_download, name="task-file"),
    path(T + "agents/", agents.agent_list, name="agents"),
    path(T + "agents/new/", agents.agent_create, name="agent-new"),
    path(T + "agents/import/", agents.agent_import_view, name="agent-import"),
    path(T + "agents/<slug:slug>/", agents.agent_detail, name="agent"),
    path(T + "agents/<slug:slug>/edit/", agents.agent_edit, name="agent-edit"),
    path(T + "agents/<slug:slug>/enabled", agents.agent_toggle, name="agent-toggle"),
    path(T + "agents/<slug:slug>/check", agents.agent_check, name="agent-check"),
    path(T + "clients/", clients.client_list, name="clients"),
    path(T + "clients/new/", clients.client_new, name="client-new"),
    path(T + "clients/<str:client_id>/revoke", clients.client_revoke_view, name="client-revoke"),
    path(T + "audit/", dashboard.audit_log, name="audit"),
    path(T + "settings/", settings.tenant_settings, name="settings"),
]
