"""Celery tasks of annotation: exports, model suggestions, and a large campaign's agreement numbers."""

from celery import shared_task


@shared_task(name="annotation.export", bind=True)
def annotation_export_task(self, export_id: int) -> None:
    from apps.annotation.exports import run_export

    run_export(export_id, worker=self.request.hostname or "")


@shared_task(name="annotation.suggest", bind=True)
def suggest_task(self, campaign_id: int) -> None:
    from apps.annotation.suggestions import run_suggestions

    run_suggestions(campaign_id, worker=self.request.hostname or "")


@shared_task(name="annotation.quality")
def campaign_quality_task(campaign_id: int) -> None:
    from apps.annotation.quality import compute_campaign_quality

    compute_campaign_quality(campaign_id)
