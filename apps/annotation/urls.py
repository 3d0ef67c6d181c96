from django.urls import path

from apps.annotation import views

app_name = "annotation"
urlpatterns = [
    path("annotation/", views.all_campaigns, name="all"),
    path("projects/<int:project_id>/campaigns/", views.campaign_list, name="list"),
    path("projects/<int:project_id>/campaigns/new/", views.campaign_create, name="create"),
    path("projects/<int:project_id>/campaigns/<int:campaign_id>/", views.campaign_detail, name="detail"),
    path("projects/<int:project_id>/campaigns/<int:campaign_id>/annotate/", views.annotate, name="annotate"),
    path("projects/<int:project_id>/campaigns/<int:campaign_id>/review/", views.review, name="review"),
    path("projects/<int:project_id>/campaigns/<int:campaign_id>/review/<int:annotation_id>/correct/", views.correct,
         name="correct"),
    path("projects/<int:project_id>/campaigns/<int:campaign_id>/<str:action>/", views.campaign_action,
         name="action"),
]
