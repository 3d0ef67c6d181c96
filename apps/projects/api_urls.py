from django.urls import path

from apps.projects import api

urlpatterns = [
    path("permissions/", api.PermissionCatalogueApi.as_view(), name="api-permissions"),
    path("projects/", api.ProjectListCreateApi.as_view(), name="api-projects"),
    path("projects/<int:project_id>/", api.ProjectDetailApi.as_view(), name="api-project"),
    path("projects/<int:project_id>/archive/", api.ProjectArchiveApi.as_view(), name="api-project-archive"),
    path("projects/<int:project_id>/members/", api.MemberListCreateApi.as_view(), name="api-project-members"),
    path("projects/<int:project_id>/members/<int:membership_id>/", api.MemberDetailApi.as_view(),
         name="api-project-member"),
    path("projects/<int:project_id>/roles/", api.RoleListCreateApi.as_view(), name="api-project-roles"),
    path("projects/<int:project_id>/roles/<int:role_id>/", api.RoleDetailApi.as_view(), name="api-project-role"),
    path("projects/<int:project_id>/grants/", api.GrantListCreateApi.as_view(), name="api-project-grants"),
    path("projects/<int:project_id>/grants/<int:grant_id>/", api.GrantDetailApi.as_view(), name="api-project-grant"),
    path("projects/<int:project_id>/audit/", api.AuditListApi.as_view(), name="api-project-audit"),
    path("projects/<int:project_id>/audit/export.<str:export_format>", api.AuditExportApi.as_view(),
         name="api-project-audit-export"),
]
