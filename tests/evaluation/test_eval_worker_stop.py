"""An inference worker told to stop (SIGTERM) hands its eval run back after the batch in hand: the
items stored are kept, the worker exits, and another worker generates only the items missing."""

import os
import signal
import socket

import pytest

from apps.datasets.models import Dataset, DatasetRow, DatasetVersion
from apps.evaluation.models import EvalItem, EvalRun, EvalSuite
from apps.evaluation.services import eval_run_start
from tests.conftest import _start_worker, _stop_worker, wait_for
from workbench.celery import app

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(420)]

ROWS = 96  # three batches of 32


def test_a_stopping_inference_worker_hands_its_eval_run_back_and_another_finishes_it(scientist, project, owner,
                                                                                     tiny_model, inference_worker):
    dataset = Dataset.objects.create(project=project, name="Long", created_by=owner)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status="ready", author=owner, row_count=ROWS,
                                            content_hash="d" * 64)
    DatasetRow.objects.bulk_create([DatasetRow(version=version, position=i, row_hash=f"{i:064d}", metadata={},
                                               prompt=" ".join(["what is the capital of france ?"] * (1 + i % 3)),
                                               response="paris") for i in range(ROWS)])
    suite = EvalSuite.objects.create(project=project, name="Long", dataset_version=version, max_new_tokens=30,
                                     metrics=[{"metric": "rouge_l", "key": "rouge_l", "threshold": None}])
    session_worker = f"test-inference-{os.getpid()}@{socket.gethostname()}"
    app.control.cancel_consumer("inference", destination=[session_worker], reply=True, timeout=10)
    stopping = _start_worker(queues="inference", pool="threads", concurrency=4, name="stopping-inference")
    try:
        run = eval_run_start(user=scientist, suite=suite, model=tiny_model.pk)
        run = wait_for(lambda: (r := EvalRun.objects.get(pk=run.pk)).items_done >= 32 and r, timeout=120,
                       interval=0.05, what="the first batch")
        assert run.worker.startswith("stopping-inference")
        stopping.send_signal(signal.SIGTERM)
        assert stopping.wait(60) == 0  # the stop waited for the batch in hand, not for the rest
        run.refresh_from_db()
        assert (run.state, run.worker, run.runs) == ("queued", "", 0)  # not a lost worker
        kept = dict(EvalItem.objects.filter(run=run).values_list("pk", "output"))
        assert 32 <= len(kept) < ROWS and len(kept) % 32 == 0 and run.items_done == len(kept)
    finally:
        if stopping.poll() is None:
            _stop_worker(stopping)
        app.control.add_consumer("inference", destination=[session_worker], reply=True, timeout=10)

    wait_for(lambda: EvalRun.objects.get(pk=run.pk).state in EvalRun.ENDED, timeout=240, interval=0.2,
             what="the run to end")
    run.refresh_from_db()
    assert run.state == "succeeded", run.error
    assert run.runs == 1 and run.worker.startswith("test-inference")
    assert run.items_done == run.items_total == ROWS
    made = dict(EvalItem.objects.filter(run=run).values_list("pk", "output"))
    assert len(made) == ROWS and {pk: made[pk] for pk in kept} == kept  # the items stored before the stop are kept
    assert run.aggregates["rouge_l"] is not None
