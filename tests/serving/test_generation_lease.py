"""A generation runs under the jobs lease: a redelivered message never runs it twice, and one
whose worker died mid-answer ends with the reason instead of streaming the answer again. A worker
told to stop hands back a generation it has not started streaming; one streaming is finished."""

import pytest
from django.utils import timezone

from apps.core import jobs
from apps.core.jobs import mark_worker_stopping
from apps.serving import events
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


def test_a_generation_taken_by_a_stopping_worker_is_handed_back_and_the_next_worker_runs_it_as_its_first(
        project, owner, monkeypatch):
    sent = []
    monkeypatch.setattr(jobs, "current_app", type("Broker", (), {
        "send_task": staticmethod(lambda name, *, args, queue, **options: sent.append((name, args, queue)))}))
    generation = Generation.objects.create(project=project, model=placeholder_model(project), user=owner,
                                           source="api", prompt="Hello", state="queued")
    mark_worker_stopping("stopping@host")  # what its worker's warm shutdown does (apps.core.tasks)
    run_generation(generation.pk, worker="stopping@host")
    generation.refresh_from_db()
    assert (generation.state, generation.runs, generation.worker, generation.output) == ("queued", 0, "", "")
    assert sent == [("serving.generate", [generation.pk], "inference")]
    run_generation(generation.pk, worker="b@host")  # its placeholder model has no weights: it fails to load
    generation.refresh_from_db()
    assert (generation.state, generation.runs, generation.worker) == ("failed", 1, "b@host")
    assert "was lost" not in generation.error  # a hand-back is not a lost worker


@pytest.mark.slow
@pytest.mark.timeout(240)  # the tiny model and torch, loaded in this process
def test_a_generation_already_streaming_when_its_worker_is_told_to_stop_is_finished(project, owner, tiny_model,
                                                                                   monkeypatch):
    streamed = []

    def delta(generation_id, text):  # the first text reaches the caller, then the worker is told to stop
        streamed.append(text)
        mark_worker_stopping("stopping@host")

    monkeypatch.setattr(events, "delta", delta)
    generation = Generation.objects.create(project=project, model=tiny_model, user=owner, source="api",
                                           prompt="what is the capital of france ?", state="queued",
                                           params={"max_new_tokens": 60, "temperature": 1.0, "seed": 1})
    run_generation(generation.pk, worker="stopping@host")
    generation.refresh_from_db()
    assert streamed and generation.state == "succeeded" and generation.runs == 1, generation.result()
    assert generation.output == "".join(streamed) and generation.finish_reason in ("stop", "length")
