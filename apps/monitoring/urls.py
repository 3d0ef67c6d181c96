from django.urls import path

from apps.monitoring import views

app_name = "monitoring"
urlpatterns = [
    path("monitoring/", views.overview, name="overview"),
    path("metrics", views.metrics, name="metrics"),
]
