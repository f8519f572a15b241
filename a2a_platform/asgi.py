import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "a2a_platform.settings")

# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from a2a_platform.a2a_asgi import A2AHandler, http_router  # noqa: E402
from a2a_platform.collector import freeze_startup_objects  # noqa: E402
from a2a_platform.console.routing import websocket_urlpatterns  # noqa: E402
from a2a_platform.daphne_requests import disable_form_parsing  # noqa: E402
from a2a_platform.daphne_sockets import wait_for_closing_clients  # noqa: E402
from a2a_platform.forwarded import forwarded_client  # noqa: E402

# Daphne serves this application: its requests need not parse form bodies Django parses anyway.
disable_form_parsing()
# ...and a client whose socket the server closes gets time to answer, so it hears why (daphne_sockets.py).
wait_for_closing_clients()

# Behind proxies (TRUSTED_PROXY_COUNT), the caller's address from their X-Forwarded-For, for every route.
application = forwarded_client(
    ProtocolTypeRouter(
        {
            # The A2A routes skip the thread hops of Django's middleware (a2a_platform/a2a_asgi.py).
            "http": http_router(A2AHandler(), django_asgi_app),
            # The console's live feed. The origin check stops other sites from
            # opening a socket with the operator's session cookie.
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)

# Daphne serves it next: what start-up loaded lives as long as the process (a2a_platform/collector.py).
freeze_startup_objects()
