"""Websocket routes of every app, gathered in one place for the ASGI router."""

from apps.projects.routing import websocket_urlpatterns as project_ws

websocket_urlpatterns = [*project_ws]
