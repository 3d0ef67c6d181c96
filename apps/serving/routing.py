from django.urls import path

from apps.serving import consumers

websocket_urlpatterns = [
    path("ws/projects/<int:project_id>/playground/", consumers.PlaygroundConsumer.as_asgi()),
]
