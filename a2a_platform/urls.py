from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import include, path, re_path

from a2a_platform import health
from a2a_platform.console.views.base import favicon

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("api/", include("a2a_platform.api.urls")),
    path("a2a/", include("tasks_app.urls")),
    path("console/", include("a2a_platform.console.urls")),
    # Daphne serves no files: the admin's CSS and JS come from the apps' static folders.
    # A sync view on its own path, so the async A2A views keep their streaming.
    re_path(r"^static/(?P<path>.+)$", serve_static, {"insecure": True}),
]
