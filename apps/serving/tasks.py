"""Celery tasks of serving: one generation on an `inference` worker (the engine is imported when it runs)."""

from celery import shared_task


@shared_task(name="serving.generate", bind=True)
def generate_task(self, generation_id: int) -> None:
    from apps.serving.runner import run_generation

    run_generation(generation_id, worker=self.request.hostname or "")
