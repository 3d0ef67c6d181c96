from django.urls import path

from apps.registry import api

urlpatterns = [
    path("projects/<int:project_id>/models/", api.ProjectModelListCreateApi.as_view(), name="api-models"),
    path("models/<int:model_id>/", api.ModelDetailApi.as_view(), name="api-model"),
    path("models/<int:model_id>/download/", api.AdapterDownloadApi.as_view(), name="api-model-download"),
    path("models/<int:model_id>/merge/", api.AdapterMergeApi.as_view(), name="api-model-merge"),
    path("models/<int:model_id>/exports/", api.ModelExportsApi.as_view(), name="api-model-exports"),
    path("model-exports/<int:export_id>/", api.ModelExportApi.as_view(), name="api-model-export"),
    path("model-exports/<int:export_id>/download/", api.ModelExportDownloadApi.as_view(),
         name="api-model-export-download"),
    path("models/<int:model_id>/memory-estimate/", api.ModelMemoryEstimateApi.as_view(),
         name="api-model-memory"),
    path("models/<int:model_id>/precision-measurements/", api.PrecisionMeasurementsApi.as_view(),
         name="api-model-precision-measurements"),
    path("precision-measurements/<int:job_id>/", api.PrecisionMeasurementApi.as_view(),
         name="api-precision-measurement"),
    path("precision-measurements/<int:job_id>/cancel/", api.PrecisionMeasurementCancelApi.as_view(),
         name="api-precision-measurement-cancel"),
    path("catalogue/", api.CatalogueListCreateApi.as_view(), name="api-catalogue"),
    path("catalogue/upload/", api.CatalogueUploadApi.as_view(), name="api-catalogue-upload"),
    path("catalogue/<int:entry_id>/", api.CatalogueDetailApi.as_view(), name="api-catalogue-entry"),
    path("projects/<int:project_id>/catalogue/", api.ProjectCatalogueApi.as_view(), name="api-project-catalogue"),
    path("projects/<int:project_id>/catalogue/<int:entry_id>/", api.ProjectCatalogueDisableApi.as_view(),
         name="api-project-catalogue-entry"),
    path("models/<int:model_id>/shares/", api.AdapterSharesApi.as_view(), name="api-model-shares"),
    path("models/<int:model_id>/shares/<int:target_id>/", api.AdapterShareDetailApi.as_view(),
         name="api-model-share"),
    path("models/<int:model_id>/aliases/", api.ModelAliasesApi.as_view(), name="api-model-aliases"),
    path("models/<int:model_id>/aliases/<str:alias>/", api.ModelAliasApi.as_view(), name="api-model-alias"),
]
