"""Celery tasks of serving: one generation, or one batch of texts classified, on an `inference` worker (the
engine is imported when it runs);
the periodic check of canary rollouts, the expiry of captures and of generations' text."""

from celery import shared_task


@shared_task(name="serving.generate", bind=True)
def generate_task(self, generation_id: int) -> None:
    from apps.serving.runner import run_generation

    run_generation(generation_id, worker=self.request.hostname or "")


@shared_task(name="serving.classify", bind=True)
def classify_task(self, classification_id: int) -> None:
    from apps.serving.classify import run_classification

    run_classification(classification_id, worker=self.request.hostname or "")


@shared_task(name="serving.canary_check")
def canary_check_task() -> dict[str, int]:
    from apps.serving.canary import canary_check_all

    return canary_check_all()


@shared_task(name="serving.captures_expire")
def captures_expire_task() -> int:
    from apps.serving.captures import captures_expire

    return captures_expire()


@shared_task(name="serving.generations_scrub")
def generations_scrub_task() -> int:
    from apps.serving.services import generations_scrub

    return generations_scrub()
