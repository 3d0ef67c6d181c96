from django.apps import AppConfig


class ProvidersConfig(AppConfig):
    name = "apps.providers"
    label = "providers"
    verbose_name = "Outside model providers"
