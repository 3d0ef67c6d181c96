from celery import shared_task


@shared_task(name="monitoring.evaluate_alerts")
def evaluate_alerts_task() -> None:
    """Periodic (CELERY_BEAT_SCHEDULE): evaluate the alert rules, then notify the webhook; keep a
    queue depth sample, so the history chart has points while nobody watches."""
    from apps.monitoring.services import alerts_evaluate, alerts_notify, queue_depths_record

    alerts_evaluate()
    alerts_notify()
    queue_depths_record()
