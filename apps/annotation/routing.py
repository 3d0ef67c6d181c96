from django.urls import path

from apps.annotation import consumers

websocket_urlpatterns = [
    path("ws/campaigns/<int:campaign_id>/", consumers.CampaignProgressConsumer.as_asgi()),
]
