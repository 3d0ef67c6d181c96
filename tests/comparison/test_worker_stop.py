"""An inference worker told to stop (SIGTERM: a rolling update, a scale-down) does not hold the stop
up for the rest of a comparison: after the batch in hand the comparison goes back to the queue with
its cells stored, the worker exits, and another worker makes only the cells still missing."""

import os
import signal
import socket

import pytest

from apps.comparison.models import Comparison, Output
from apps.registry.services import run_inspection
from tests.comparison.test_run import ended
from tests.conftest import _start_worker, _stop_worker, wait_for
from workbench.celery import app

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(420)]  # two workers started, two models loaded twice

PROMPTS = 64  # two models: 128 cells, four batches of 32


def test_a_stopping_inference_worker_hands_its_comparison_back_after_its_batch_and_another_finishes_it(
        client, scientist, project, tiny_model, inference_worker):
    # This test's own inference worker must take the comparison: the session's leaves the queue meanwhile.
    session_worker = f"test-inference-{os.getpid()}@{socket.gethostname()}"
    app.control.cancel_consumer("inference", destination=[session_worker], reply=True, timeout=10)
    stopping = _start_worker(queues="inference", pool="threads", concurrency=4, name="stopping-inference")
    try:
        client.force_login(scientist)
        second = client.post(f"/api/projects/{project.pk}/models/", {"name": "Tiny again",
                                                                      "path": tiny_model.source_path},
                             content_type="application/json")
        assert second.status_code == 201, second.content
        run_inspection(second.json()["id"])  # what the default worker does (only inference workers run here)
        prompts = [" ".join(["what is the capital of france ?"] * (1 + i % 3)) for i in range(PROMPTS)]
        response = client.post(f"/api/projects/{project.pk}/comparisons/", {
            "name": "Long", "models": [tiny_model.pk, second.json()["id"]], "prompts": prompts,
            "params": {"max_new_tokens": 30, "temperature": 1.0, "seed": 1}}, content_type="application/json")
        assert response.status_code == 201, response.content
        comparison_id = response.json()["id"]
        comparison = wait_for(lambda: (c := Comparison.objects.get(pk=comparison_id)).cells_done >= 32 and c,
                              timeout=120, interval=0.05, what="the first batch")
        assert comparison.worker.startswith("stopping-inference")
        stopping.send_signal(signal.SIGTERM)
        assert stopping.wait(60) == 0  # the stop waited for the batch in hand, not for the rest
        comparison.refresh_from_db()
        assert (comparison.state, comparison.worker, comparison.runs) == ("queued", "", 0)  # not a lost worker
        kept = dict(Output.objects.filter(comparison_id=comparison_id).values_list("pk", "created_at"))
        assert 32 <= len(kept) < 2 * PROMPTS and len(kept) % 32 == 0 and comparison.cells_done == len(kept)
    finally:
        if stopping.poll() is None:
            _stop_worker(stopping)
        app.control.add_consumer("inference", destination=[session_worker], reply=True, timeout=10)

    finished = ended(client, comparison_id, timeout=240)  # the session's worker takes the message sent back
    assert finished["state"] == "succeeded", finished["error"]
    assert finished["runs"] == 1 and finished["worker"].startswith("test-inference")
    assert finished["cells_done"] == finished["cells_total"] == 2 * PROMPTS
    made = dict(Output.objects.filter(comparison_id=comparison_id).values_list("pk", "created_at"))
    assert len(made) == 2 * PROMPTS
    assert {pk: made[pk] for pk in kept} == kept  # the cells stored before the stop were not made again
