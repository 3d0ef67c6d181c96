from django.urls import path

from apps.annotation import api

urlpatterns = [
    path("projects/<int:project_id>/label-schemas/", api.ProjectSchemasApi.as_view(), name="api-label-schemas"),
    path("label-schemas/<int:schema_id>/", api.SchemaDetailApi.as_view(), name="api-label-schema"),
    path("projects/<int:project_id>/campaigns/", api.ProjectCampaignsApi.as_view(), name="api-campaigns"),
    path("campaigns/<int:campaign_id>/", api.CampaignDetailApi.as_view(), name="api-campaign"),
    path("campaigns/<int:campaign_id>/close/", api.CampaignCloseApi.as_view(), name="api-campaign-close"),
    path("campaigns/<int:campaign_id>/suggestions/stop/", api.SuggestionsStopApi.as_view(),
         name="api-campaign-suggestions-stop"),
    path("campaigns/<int:campaign_id>/next/", api.NextItemApi.as_view(), name="api-campaign-next"),
    path("campaigns/<int:campaign_id>/mine/", api.MyAnnotationsApi.as_view(), name="api-campaign-mine"),
    path("campaigns/<int:campaign_id>/items/<int:item_id>/", api.ItemApi.as_view(), name="api-campaign-item"),
    path("campaigns/<int:campaign_id>/items/<int:item_id>/submit/", api.SubmitApi.as_view(),
         name="api-campaign-submit"),
    path("campaigns/<int:campaign_id>/items/<int:item_id>/skip/", api.SkipApi.as_view(), name="api-campaign-skip"),
    path("campaigns/<int:campaign_id>/items/<int:item_id>/draft/", api.DraftApi.as_view(), name="api-campaign-draft"),
    path("campaigns/<int:campaign_id>/items/<int:item_id>/adjudicate/", api.AdjudicateApi.as_view(),
         name="api-campaign-adjudicate"),
    path("campaigns/<int:campaign_id>/items/<int:item_id>/gold/", api.GoldApi.as_view(), name="api-campaign-gold"),
    path("campaigns/<int:campaign_id>/review/", api.ReviewQueueApi.as_view(), name="api-campaign-review"),
    path("campaigns/<int:campaign_id>/quality/", api.QualityApi.as_view(), name="api-campaign-quality"),
    path("campaigns/<int:campaign_id>/exports/", api.CampaignExportsApi.as_view(), name="api-campaign-exports"),
    path("campaigns/<int:campaign_id>/annotations/", api.RawExportApi.as_view(), name="api-campaign-annotations"),
    path("annotations/<int:annotation_id>/", api.AnnotationApi.as_view(), name="api-annotation"),
    path("annotations/<int:annotation_id>/review/", api.ReviewApi.as_view(), name="api-annotation-review"),
    path("annotation-exports/<int:export_id>/", api.ExportDetailApi.as_view(), name="api-annotation-export"),
]
