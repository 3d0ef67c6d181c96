"""A generation runs under the jobs lease: a redelivered message never runs it twice, and one
whose worker died mid-answer ends with the reason instead of streaming the answer again."""

import pytest
from django.utils import timezone

from apps.serving.models import Generation
from apps.serving.runner import run_generation
from tests.comparison.factories import placeholder_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def test_a_generation_whose_worker_died_is_ended_with_the_reason_by_the_next_worker(project, owner, settings):
    settings.TRAINING_HEARTBEAT_STALE_S = 1.0
    generation = Generation.objects.create(project=project, model=placeholder_model(project), user=owner,
                                           source="api", prompt="Hello", state="running", runs=1, worker="gone@host",
                                           heartbeat_at=timezone.now() - timezone.timedelta(seconds=60))
    run_generation(generation.pk, worker="b@host")  # the message the reaper sent again
    generation.refresh_from_db()
    assert (generation.state, generation.runs, generation.worker) == ("failed", 2, "b@host")
    assert "worker generating this answer was lost" in generation.error and generation.output == ""


def test_an_ended_generation_is_not_run_again_by_a_late_message(project, owner):
    generation = Generation.objects.create(project=project, model=placeholder_model(project), user=owner,
                                           source="api", prompt="Hello", state="succeeded", output="Hi")
    run_generation(generation.pk, worker="b@host")
    generation.refresh_from_db()
    assert (generation.state, generation.runs, generation.output) == ("succeeded", 0, "Hi")
