from django.urls import path

from apps.accounts import api

urlpatterns = [
    path("me/", api.MeApi.as_view(), name="api-me"),
]
