from django.urls import path

from apps.datasets import views

app_name = "datasets"
urlpatterns = [
    path("datasets/", views.all_datasets, name="all"),
    path("projects/<int:project_id>/datasets/", views.dataset_list, name="list"),
    path("projects/<int:project_id>/datasets/<int:dataset_id>/", views.dataset_detail, name="detail"),
]
