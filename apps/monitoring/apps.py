from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "apps.monitoring"
    label = "monitoring"
    verbose_name = "Monitoring"

    def ready(self) -> None:
        # Connects the Celery signal handlers that make each worker report its resource use;
        # they only fire inside a worker process.
        from apps.monitoring import worker_report  # noqa: F401
