"""Celery tasks of annotation: exports and model suggestions."""

from celery import shared_task


@shared_task(name="annotation.export", bind=True)
def annotation_export_task(self, export_id: int) -> None:
    from apps.annotation.exports import run_export

    run_export(export_id, worker=self.request.hostname or "")


@shared_task(name="annotation.suggest", bind=True)
def suggest_task(self, campaign_id: int) -> None:
    from apps.annotation.suggestions import run_suggestions

    run_suggestions(campaign_id, worker=self.request.hostname or "")
