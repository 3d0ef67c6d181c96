"""ASGI entry point: HTTP (Django) and websockets (Channels) in one server."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")
django_http = get_asgi_application()  # sets Django up before the imports below

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from apps.core.asgi import BodySizeLimit, SameOriginWebsocket  # noqa: E402
from workbench.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodySizeLimit(django_http, max_bytes=settings.MAX_REQUEST_BODY_BYTES,
                              upload_max_bytes=settings.MAX_UPLOAD_BYTES, upload_paths=settings.UPLOAD_PATHS),
        # The handshake's Origin must be the site's own, in full: blocks cross-site (and cross-port)
        # websocket hijacking.
        "websocket": SameOriginWebsocket(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
