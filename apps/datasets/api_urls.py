from django.urls import path

from apps.datasets import api

urlpatterns = [
    path("projects/<int:project_id>/datasets/", api.ProjectDatasetListCreateApi.as_view(), name="api-datasets"),
    path("datasets/<int:dataset_id>/", api.DatasetDetailApi.as_view(), name="api-dataset"),
    path("datasets/shared/", api.SharedDatasetListApi.as_view(), name="api-datasets-shared"),
]
