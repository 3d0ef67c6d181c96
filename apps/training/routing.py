from django.urls import path

from apps.training import consumers

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", consumers.JobConsumer.as_asgi()),
]
