from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "apps.training"
    label = "training"
    verbose_name = "Fine-tune jobs"

    def ready(self) -> None:
        # Connects the Celery signal handlers by which a training worker consumes the queues of the jobs
        # its devices fit and advertises them; they only fire inside a worker process.
        from apps.training import capacity  # noqa: F401
