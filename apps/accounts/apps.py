from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"

    def ready(self):
        from apps.accounts import schema, signals  # noqa: F401  (register the OpenAPI extension, receivers)

        signals.connect_sso_signals()
