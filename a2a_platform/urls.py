from django.contrib import admin
from django.urls import include, path

from a2a_platform import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("api/", include("a2a_platform.api.urls")),
    path("a2a/", include("tasks_app.urls")),
    path("console/", include("a2a_platform.console.urls")),
]
