"""The comparison runner in this process (what the Celery task calls) on the tiny model: a
comparison whose worker was lost is taken over and finishes only the missing cells; a lost
worker too many times fails it; an ended comparison is never run again."""

import pytest
from django.utils import timezone

from apps.comparison.models import Comparison, Contestant, Output, Prompt
from apps.comparison.runner import run_comparison

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fast_heartbeat(settings):
    settings.TRAINING_HEARTBEAT_S = 0.2
    settings.TRAINING_HEARTBEAT_STALE_S = 1
    settings.TRAINING_MAX_RUNS = 3


def orphaned_comparison(project, owner, model, *, runs=1) -> Comparison:
    """RUNNING, its heartbeat an hour old: its worker died after storing the first cell."""
    comparison = Comparison.objects.create(project=project, name="Lost", state="running", runs=runs,
                                           heartbeat_at=timezone.now() - timezone.timedelta(hours=1),
                                           params={"max_new_tokens": 4, "temperature": 0.0}, cells_total=3,
                                           created_by=owner)
    contestant = Contestant.objects.create(comparison=comparison, model=model, position=0)
    prompts = [Prompt.objects.create(comparison=comparison, position=i, text=text)
               for i, text in enumerate(["what is paris ?", "what of france ?", "is paris ?"])]
    Output.objects.create(comparison=comparison, prompt=prompts[0], contestant=contestant, text="stored before")
    return comparison


def test_a_comparison_whose_worker_was_lost_is_taken_over_and_only_missing_cells_are_made(
        project, owner, tiny_model, fast_heartbeat):
    comparison = orphaned_comparison(project, owner, tiny_model)
    run_comparison(comparison.pk, worker="second")
    comparison.refresh_from_db()
    assert comparison.state == "succeeded" and comparison.runs == 2 and comparison.worker == "second"
    texts = list(comparison.outputs.order_by("prompt__position").values_list("text", flat=True))
    assert len(texts) == 3 and texts[0] == "stored before"
    assert comparison.cells_done == 3

    run_comparison(comparison.pk, worker="third")  # a late duplicate message: nothing happens
    comparison.refresh_from_db()
    assert comparison.runs == 2 and comparison.worker == "second"


def test_a_comparison_that_lost_its_worker_too_often_fails_with_the_reason(project, owner, tiny_model,
                                                                          fast_heartbeat):
    comparison = orphaned_comparison(project, owner, tiny_model, runs=3)
    run_comparison(comparison.pk, worker="fourth")
    comparison.refresh_from_db()
    assert comparison.state == "failed" and "lost 3 times" in comparison.error
    assert comparison.outputs.count() == 1


def test_a_model_that_cannot_load_fails_the_comparison_with_its_error(project, owner, fast_heartbeat):
    from tests.comparison.factories import make_comparison

    comparison = make_comparison(project, owner, state="queued", outputs=False)  # placeholder models: no weights
    run_comparison(comparison.pk, worker="w")
    comparison.refresh_from_db()
    assert comparison.state == "failed" and comparison.error and comparison.finished_at
