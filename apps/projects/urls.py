from django.urls import path

from apps.accounts import views as account_views
from apps.projects import views

app_name = "projects"
urlpatterns = [
    path("", views.project_list, name="list"),
    path("<int:project_id>/", views.project_dashboard, name="dashboard"),
    path("<int:project_id>/settings/", views.project_settings, name="settings"),
    path("<int:project_id>/members/", views.members, name="members"),
    path("<int:project_id>/members/add/", views.member_add, name="member_add"),
    path("<int:project_id>/members/invite/", views.member_invite, name="member_invite"),
    path("<int:project_id>/members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("<int:project_id>/members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path("<int:project_id>/leave/", views.leave, name="leave"),
    path("<int:project_id>/roles/", views.roles, name="roles"),
    path("<int:project_id>/roles/<int:role_id>/", views.role_edit, name="role_edit"),
    path("<int:project_id>/access/", views.access, name="access"),
    path("<int:project_id>/audit/", views.audit, name="audit"),
    path("<int:project_id>/tokens/", account_views.project_tokens, name="tokens"),
]
