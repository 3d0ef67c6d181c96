from django.urls import path

from apps.registry import views

app_name = "registry"
urlpatterns = [
    path("models/", views.all_models, name="all"),
    path("models/catalogue-upload/", views.catalogue_upload, name="catalogue-upload"),
    path("models/catalogue/<int:entry_id>/", views.catalogue_entry, name="catalogue-entry"),
    path("projects/<int:project_id>/models/", views.model_list, name="list"),
    path("projects/<int:project_id>/models/<int:model_id>/", views.model_detail, name="detail"),
    path("projects/<int:project_id>/models/<int:model_id>/merge/", views.model_merge, name="merge"),
    path("projects/<int:project_id>/models/<int:model_id>/exports/", views.model_export, name="export"),
    path("projects/<int:project_id>/models/<int:model_id>/exports/<int:export_id>/delete/", views.model_export_delete,
         name="export-delete"),
    path("projects/<int:project_id>/models/<int:model_id>/serving-precision/", views.serving_precision,
         name="serving-precision"),
    path("projects/<int:project_id>/models/<int:model_id>/precision-measurements/", views.precision_measurement,
         name="precision-measurement"),
    path("projects/<int:project_id>/models/<int:model_id>/aliases/", views.alias_move, name="alias-move"),
    path("projects/<int:project_id>/models/<int:model_id>/canary/", views.alias_canary, name="alias-canary"),
    path("projects/<int:project_id>/catalogue/<int:entry_id>/", views.catalogue_toggle, name="catalogue-toggle"),
    path("projects/<int:project_id>/models/<int:model_id>/shares/", views.adapter_share, name="share"),
]
