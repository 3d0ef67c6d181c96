"""Celery tasks of comparisons: a grid run on an `inference` worker (apps.core.tasks reaps those
whose worker vanished)."""

from celery import shared_task


@shared_task(name="comparison.run", bind=True)
def compare_task(self, comparison_id: int) -> None:
    from apps.comparison.runner import run_comparison

    run_comparison(comparison_id, worker=self.request.hostname or "")

