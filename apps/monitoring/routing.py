from django.urls import path

from apps.monitoring import consumers

websocket_urlpatterns = [
    path("ws/monitoring/", consumers.DashboardConsumer.as_asgi()),
]
