from django.urls import path

from apps.datasets import api

urlpatterns = [
    path("projects/<int:project_id>/datasets/", api.ProjectDatasetListCreateApi.as_view(), name="api-datasets"),
    path("projects/<int:project_id>/datasets/<int:dataset_id>/imports/", api.ImportCreateApi.as_view(),
         name="api-dataset-imports"),
    path("datasets/<int:dataset_id>/", api.DatasetDetailApi.as_view(), name="api-dataset"),
    path("datasets/<int:dataset_id>/versions/", api.VersionListApi.as_view(), name="api-dataset-versions"),
    path("datasets/<int:dataset_id>/versions/<int:number>/", api.VersionDetailApi.as_view(), name="api-version"),
    path("datasets/<int:dataset_id>/versions/<int:number>/rows/", api.RowListApi.as_view(), name="api-version-rows"),
    path("datasets/<int:dataset_id>/versions/<int:number>/export.<str:export_format>", api.VersionExportApi.as_view(),
         name="api-version-export"),
    path("datasets/<int:dataset_id>/versions/<int:number>/split/", api.VersionSplitApi.as_view(),
         name="api-version-split"),
    path("datasets/<int:dataset_id>/versions/<int:number>/pii-scan/", api.VersionPiiScanApi.as_view(),
         name="api-version-pii-scan"),
    path("datasets/<int:dataset_id>/versions/<int:number>/exports/", api.VersionExportJobsApi.as_view(),
         name="api-version-exports"),
    path("dataset-exports/<int:export_id>/", api.ExportJobApi.as_view(), name="api-dataset-export"),
    path("dataset-exports/<int:export_id>/download/", api.ExportDownloadApi.as_view(),
         name="api-dataset-export-download"),
    path("datasets/<int:dataset_id>/versions/<int:number>/edit/", api.VersionEditApi.as_view(),
         name="api-version-edit"),
    path("datasets/<int:dataset_id>/versions/<int:number>/redact/", api.VersionRedactApi.as_view(),
         name="api-version-redact"),
    path("datasets/shared/", api.SharedDatasetListApi.as_view(), name="api-datasets-shared"),
    path("derive-jobs/<int:job_id>/", api.DeriveJobDetailApi.as_view(), name="api-derive-job"),
    path("imports/<int:import_id>/", api.ImportDetailApi.as_view(), name="api-import"),
    path("imports/<int:import_id>/start/", api.ImportStartApi.as_view(), name="api-import-start"),
    path("imports/<int:import_id>/cancel/", api.ImportCancelApi.as_view(), name="api-import-cancel"),
]
