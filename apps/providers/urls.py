from django.urls import path

from apps.providers import views

app_name = "providers"
urlpatterns = [
    path("providers/", views.provider_list, name="list"),
    path("providers/<int:provider_id>/", views.provider_detail, name="detail"),
    path("providers/<int:provider_id>/action/", views.provider_action, name="action"),
    path("projects/<int:project_id>/provider-costs/", views.project_costs, name="project-costs"),
    path("providers/allowlist/<int:network_id>/remove/", views.network_remove, name="network-remove"),
]
