from django.urls import path

from apps.projects import api

urlpatterns = [
    path("projects/", api.ProjectListCreateApi.as_view(), name="api-projects"),
    path("projects/<int:project_id>/", api.ProjectDetailApi.as_view(), name="api-project"),
    path("projects/<int:project_id>/members/", api.ProjectMemberListApi.as_view(), name="api-project-members"),
]
