"""Websocket routes: each capability adds its consumers here as it lands."""

websocket_urlpatterns: list = []
