"""Celery tasks of annotation: exports and model suggestions."""

from celery import shared_task


@shared_task(name="annotation.export")
def annotation_export_task(export_id: int) -> None:
    from apps.annotation.exports import run_export

    run_export(export_id)


@shared_task(name="annotation.suggest")
def suggest_task(campaign_id: int) -> None:
    from apps.annotation.suggestions import run_suggestions

    run_suggestions(campaign_id)
