from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import include, path, re_path
from oauth2_provider import urls as oauth2_urls

from a2a_platform import health
from a2a_platform.console.views.base import favicon
from agents.views import not_found

# django-oauth-toolkit's protocol endpoints only (token, authorize, revoke, introspect, device,
# metadata). Its own pages that list, register and edit applications and tokens, and its dynamic
# client registration, know nothing of tenants: a client registered there had no tenant (a 500),
# and any signed-in user could open them. Clients are made per tenant in the console, the
# management API and `manage.py oauth_client`.
OAUTH2_PATTERNS = (oauth2_urls.metadata_urlpatterns + oauth2_urls.base_urlpatterns, oauth2_urls.app_name)

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("o/", include(OAUTH2_PATTERNS, namespace="oauth2_provider")),
    path("api/", include("a2a_platform.api.urls")),
    path("a2a/", include("tasks_app.urls")),
    # A client that trims every slash: the same JSON 404 as anything else under /a2a/.
    path("a2a", not_found),
    path("console/", include("a2a_platform.console.urls")),
    # Daphne serves no files: the admin's CSS and JS come from the apps' static folders.
    # A sync view on its own path, so the async A2A views keep their streaming.
    re_path(r"^static/(?P<path>.+)$", serve_static, {"insecure": True}),
]
