from django.urls import path

from apps.datasets import views

app_name = "datasets"
base = "projects/<int:project_id>/datasets/<int:dataset_id>/"
urlpatterns = [
    path("datasets/", views.all_datasets, name="all"),
    path("projects/<int:project_id>/datasets/", views.dataset_list, name="list"),
    path(base, views.dataset_detail, name="detail"),
    path(base + "imports/", views.import_upload, name="upload"),
    path(base + "imports/<int:import_id>/", views.import_page, name="import"),
    path(base + "imports/<int:import_id>/cancel/", views.import_cancel, name="import_cancel"),
    path(base + "versions/<int:number>/", views.version_page, name="version"),
    path(base + "versions/<int:number>/rows/<int:position>/", views.row_page, name="row"),
    path(base + "versions/<int:number>/exports/", views.version_export_job, name="export"),
    path(base + "versions/<int:number>/stats/", views.version_stats, name="stats"),
    path(base + "versions/<int:number>/split/", views.version_split, name="split"),
    path(base + "versions/<int:number>/purge/", views.version_purge, name="purge"),
    path(base + "versions/<int:number>/pii/<str:action>/", views.version_pii, name="pii"),
    path(base + "diff/", views.version_diff, name="diff"),
]
