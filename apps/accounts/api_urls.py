from django.urls import path

from apps.accounts import api

urlpatterns = [
    path("me/", api.MeApi.as_view(), name="api-me"),
    path("tokens/", api.PersonalTokenListCreateApi.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>/", api.TokenRevokeApi.as_view(), name="api-token"),
    path("projects/<int:project_id>/tokens/", api.ProjectTokenListCreateApi.as_view(), name="api-project-tokens"),
]
