"""Websocket routes of every app, gathered in one place for the ASGI router."""

from apps.annotation.routing import websocket_urlpatterns as annotation_ws
from apps.comparison.routing import websocket_urlpatterns as comparison_ws
from apps.datasets.routing import websocket_urlpatterns as dataset_ws
from apps.monitoring.routing import websocket_urlpatterns as monitoring_ws
from apps.projects.routing import websocket_urlpatterns as project_ws
from apps.serving.routing import websocket_urlpatterns as serving_ws
from apps.training.routing import websocket_urlpatterns as training_ws

websocket_urlpatterns = [*project_ws, *dataset_ws, *training_ws, *serving_ws, *comparison_ws, *annotation_ws,
                         *monitoring_ws]
