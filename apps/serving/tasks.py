"""Celery tasks of serving: one generation on an `inference` worker (the engine is imported when it runs)."""

from celery import shared_task


@shared_task(name="serving.generate")
def generate_task(generation_id: int) -> None:
    from apps.serving.runner import run_generation

    run_generation(generation_id)
