from django.urls import path

from apps.accounts import oidc, views

app_name = "accounts"
urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("password/", views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("users/", views.users, name="users"),
    path("users/<int:user_id>/", views.user_action, name="user_action"),
    path("reset/<uidb64>/<token>/", views.PasswordResetView.as_view(), name="password_reset"),
    path("reset/done/", views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path("tokens/", views.personal_tokens, name="tokens"),
    path("invitation/<str:token>/", views.accept_invitation, name="accept_invitation"),
    path("sso/", views.sso_admin, name="sso_admin"),
    path("sso/<slug:provider_id>/login/", oidc.sso_login, name="sso_login"),
    path("sso/<slug:provider_id>/callback/", oidc.sso_callback, name="sso_callback"),
]
