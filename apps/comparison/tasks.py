"""Celery tasks of comparisons: a grid run on an `inference` worker, and the reaper."""

from celery import shared_task


@shared_task(name="comparison.run", bind=True)
def compare_task(self, comparison_id: int) -> None:
    from apps.comparison.runner import run_comparison

    run_comparison(comparison_id, worker=self.request.hostname or "")


@shared_task(name="comparison.reap_stale")
def reap_stale_comparisons_task() -> None:
    from apps.comparison.runner import reap_stale_comparisons

    reap_stale_comparisons()
