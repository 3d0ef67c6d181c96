from django.urls import path

from apps.datasets import consumers

websocket_urlpatterns = [
    path("ws/imports/<int:import_id>/", consumers.ImportProgressConsumer.as_asgi()),
    path("ws/derive-jobs/<int:job_id>/", consumers.DeriveProgressConsumer.as_asgi()),
]
