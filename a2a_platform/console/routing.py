from django.urls import path

from a2a_platform.console.consumers import TenantFeedConsumer

websocket_urlpatterns = [
    path("console/t/<slug:tenant>/feed/", TenantFeedConsumer.as_asgi()),
]
