from django.urls import path

from apps.projects import consumers

websocket_urlpatterns = [
    path("ws/projects/<int:project_id>/activity/", consumers.ProjectActivityConsumer.as_asgi()),
]
