from django.urls import path

from apps.registry import api

urlpatterns = [
    path("projects/<int:project_id>/models/", api.ProjectModelListCreateApi.as_view(), name="api-models"),
    path("models/<int:model_id>/", api.ModelDetailApi.as_view(), name="api-model"),
    path("models/<int:model_id>/download/", api.AdapterDownloadApi.as_view(), name="api-model-download"),
    path("models/<int:model_id>/merge/", api.AdapterMergeApi.as_view(), name="api-model-merge"),
    path("models/<int:model_id>/memory-estimate/", api.ModelMemoryEstimateApi.as_view(),
         name="api-model-memory"),
]
