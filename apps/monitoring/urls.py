from django.urls import path

from apps.monitoring import views

app_name = "monitoring"
urlpatterns = [
    path("monitoring/", views.overview, name="overview"),
    path("monitoring/alerts/<int:alert_id>/acknowledge/", views.alert_acknowledge, name="alert-acknowledge"),
    path("monitoring/alerts/<int:alert_id>/resolve/", views.alert_resolve, name="alert-resolve"),
    path("metrics", views.metrics, name="metrics"),
]
