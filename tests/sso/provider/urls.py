from django.contrib.auth import views as auth_views
from django.urls import include, path

from tests.sso.provider import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="login.html"), name="login"),
    path("o/token/", views.MischievousTokenView.as_view(), name="token"),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("control/<str:action>/", views.control),
]
