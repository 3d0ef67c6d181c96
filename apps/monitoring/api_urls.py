from django.urls import path

from apps.monitoring import api

urlpatterns = [
    path("monitoring/dashboard/", api.DashboardApi.as_view(), name="api-monitoring-dashboard"),
    path("monitoring/alerts/", api.AlertListApi.as_view(), name="api-monitoring-alerts"),
    path("monitoring/alerts/<int:alert_id>/acknowledge/", api.AlertAcknowledgeApi.as_view(),
         name="api-monitoring-alert-acknowledge"),
    path("monitoring/alerts/<int:alert_id>/resolve/", api.AlertResolveApi.as_view(), name="api-monitoring-alert-resolve"),
]
