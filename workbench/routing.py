"""Websocket routes of every app, gathered in one place for the ASGI router."""

from apps.core.routing import websocket_urlpatterns as core_ws

websocket_urlpatterns = [*core_ws]
