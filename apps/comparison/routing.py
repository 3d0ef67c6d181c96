from django.urls import path

from apps.comparison import consumers

websocket_urlpatterns = [
    path("ws/comparisons/<int:comparison_id>/", consumers.ComparisonConsumer.as_asgi()),
]
