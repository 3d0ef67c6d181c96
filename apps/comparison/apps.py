from django.apps import AppConfig


class ComparisonConfig(AppConfig):
    name = "apps.comparison"
    label = "comparison"
    verbose_name = "Comparisons"
