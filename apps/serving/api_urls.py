from django.urls import path

from apps.serving import api

urlpatterns = [
    path("models/<int:model_id>/classify/", api.ModelClassifyApi.as_view(), name="api-model-classify"),
    path("classifications/<int:classification_id>/", api.ClassificationApi.as_view(), name="api-classification"),
    path("models/<int:model_id>/aliases/<str:alias>/canary/", api.AliasCanaryApi.as_view(), name="api-alias-canary"),
    path("models/<int:model_id>/serving-metrics/", api.ModelServingMetricsApi.as_view(),
         name="api-model-serving-metrics"),
    path("models/<int:model_id>/aliases/<str:alias>/capture/", api.AliasCaptureSettingsApi.as_view(),
         name="api-alias-capture"),
    path("models/<int:model_id>/aliases/<str:alias>/captures/", api.AliasCapturesApi.as_view(),
         name="api-alias-captures"),
    path("models/<int:model_id>/aliases/<str:alias>/captures/dataset/", api.AliasCapturesDatasetApi.as_view(),
         name="api-alias-captures-dataset"),
]
