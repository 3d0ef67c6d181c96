"""A real OpenID Connect provider for the single-sign-on tests: django-oauth-toolkit in a Django
project of its own, run as a separate process on loopback (tests/sso/provider/serve.py).

Its database and first signing key come from PROVIDER_DB and PROVIDER_KEY_FILE; the tests steer it
through /control/ (users and their claims, the client, key rotation, and faults injected into the
tokens it issues), which exists only here, in the test provider."""

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECRET_KEY = "test-provider-" + "k" * 40 + "-not-a-real-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oauth2_provider",
    "tests.sso.provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.sso.provider.urls"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [HERE / "templates"],
              "APP_DIRS": True, "OPTIONS": {"context_processors": ["django.template.context_processors.request"]}}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["PROVIDER_DB"],
                         "OPTIONS": {"timeout": 20}}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/login/"
# Its own cookie names: a browser shares cookies between ports of one host, and Workbench runs on 127.0.0.1 too.
SESSION_COOKIE_NAME = "provider_session"
CSRF_COOKIE_NAME = "provider_csrftoken"
USE_TZ = True
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": Path(os.environ["PROVIDER_KEY_FILE"]).read_text(),
    "OIDC_RSA_PRIVATE_KEYS_INACTIVE": [],
    "PKCE_REQUIRED": True,
    "ROTATE_REFRESH_TOKEN": True,
    # RP-initiated logout: a valid id_token_hint ends the session without asking; the page to
    # return to must be one the client registered.
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    "OIDC_RP_INITIATED_LOGOUT_STRICT_REDIRECT_URIS": True,
    "SCOPES": {"openid": "OpenID Connect", "profile": "Profile", "email": "Email"},
    "OAUTH2_VALIDATOR_CLASS": "tests.sso.provider.views.ClaimsValidator",
}
LOGGING = {"version": 1, "disable_existing_loggers": True}
