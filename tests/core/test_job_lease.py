"""The one lease every long job kind runs under (apps.core.jobs): one parametrized suite for each
kind that uses it. Two workers handed the same message: one runs. A worker that died is taken
over once its heartbeat is stale; one lost too often fails; the reaper re-sends what went silent;
an ended job's message does nothing. A run (JobRun) writes its progress and its end only while
the row is its own, and a kind that can be cancelled stops at its next progress. A run whose
worker is stopping hands its job back, and every message sent again keeps its kind's priority."""

import contextlib
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from apps.annotation.models import AnnotationExport, Campaign, LabelSchema, SuggestionRun
from apps.comparison.models import Comparison
from apps.core import jobs
from apps.core.jobs import JobCancelled, JobRun, leased_kinds, mark_worker_stopping, reap, reap_stale
from apps.datasets.models import Dataset, DeriveJob, ExportJob, ImportJob, SearchIndexJob
from apps.evaluation.models import EvalRun, EvalSuite, Judge, JudgeRun, TeacherRun
from apps.registry.models import ModelExport, PrecisionMeasurement
from apps.serving.models import Classification, Generation
from apps.training.models import JobNode, SpeedMeasurement, TrainingJob
from tests.comparison.factories import make_comparison
from tests.training.fixtures import make_job, make_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def new_import(project, owner, state):
    dataset = Dataset.objects.create(project=project, name=f"Data {time.monotonic_ns()}", created_by=owner)
    return ImportJob.objects.create(dataset=dataset, created_by=owner, filename="rows.jsonl", size_bytes=10,
                                    state=state)


def new_derive(project, owner, state):
    return DeriveJob.objects.create(parent=make_version(project, owner, name=f"QA {time.monotonic_ns()}"),
                                    kind="pii_scan", created_by=owner, state=state)


def new_export(project, owner, state):
    return ExportJob.objects.create(version=make_version(project, owner, name=f"QA {time.monotonic_ns()}"),
                                    format="jsonl", created_by=owner, state=state)


def new_search_index_build(project, owner, state):
    return SearchIndexJob.objects.create(version=make_version(project, owner, name=f"QA {time.monotonic_ns()}"),
                                         state=state)


def new_judge_run(project, owner, state):
    from tests.comparison.factories import placeholder_model

    judge = Judge.objects.create(project=project, name=f"Judge {time.monotonic_ns()}", created_by=owner,
                                 local_model=placeholder_model(project),
                                 rubric={"kind": "pairwise", "criteria": [{"name": "helpfulness"}]})
    return JudgeRun.objects.create(project=project, judge=judge, state=state, created_by=owner,
                                   comparison=make_comparison(project, owner, outputs=False))


def new_eval_run(project, owner, state):
    from tests.comparison.factories import placeholder_model

    suite = EvalSuite.objects.create(project=project, name=f"Suite {time.monotonic_ns()}", created_by=owner,
                                     dataset_version=make_version(project, owner, name=f"QA {time.monotonic_ns()}"),
                                     metrics=[{"metric": "rouge_l", "threshold": None}])
    return EvalRun.objects.create(project=project, suite=suite, model=placeholder_model(project), state=state,
                                  created_by=owner)


def new_teacher_run(project, owner, state):
    return TeacherRun.objects.create(project=project, state=state, created_by=owner,
                                     source_version=make_version(project, owner, name=f"QA {time.monotonic_ns()}"))


def new_campaign(project, owner):
    schema = LabelSchema.objects.create(project=project, name="Form", fields=[], created_by=owner)
    return Campaign.objects.create(project=project, name="Labels", schema=schema, created_by=owner,
                                   dataset_version=make_version(project, owner, name=f"QA {time.monotonic_ns()}"))


def new_annotation_export(project, owner, state):
    return AnnotationExport.objects.create(campaign=new_campaign(project, owner), created_by=owner, state=state)


def new_suggestion_run(project, owner, state):
    return SuggestionRun.objects.create(campaign=new_campaign(project, owner), state=state)


def new_generation(project, owner, state):
    from tests.comparison.factories import placeholder_model

    return Generation.objects.create(project=project, model=placeholder_model(project), user=owner,
                                     source="api", prompt="Hello", state=state)


def new_machine_slot(project, owner, state):
    """A further machine's slot of a job across machines (apps.training.nodes), of the job's current run."""
    job = make_job(project, owner, state="running", config={"format": "prompt_response", "nodes": 2})
    TrainingJob.objects.filter(pk=job.pk).update(rendezvous_id="run-1")
    return JobNode.objects.create(job=job, slot=1, rendezvous_id="run-1", state=state)


def cancel_the_slots_job(model, pk):
    TrainingJob.objects.filter(node_slots__pk=pk).update(cancel_requested=True)


def new_calibration(project, owner, state):
    from tests.comparison.factories import placeholder_model

    # Its states keep their older stored values ("pending", "done"): the suite names them by member.
    return SpeedMeasurement.objects.create(kind="calibration", state=SpeedMeasurement.State[state.upper()],
                                           base_model=placeholder_model(project), method="sft")


def new_model_export(project, owner, state):
    from tests.comparison.factories import placeholder_model

    return ModelExport.objects.create(model=placeholder_model(project), format="gguf-f16", created_by=owner,
                                      state=state)


def new_precision_measurement(project, owner, state):
    from tests.comparison.factories import placeholder_model

    return PrecisionMeasurement.objects.create(model=placeholder_model(project), created_by=owner, state=state)


def new_classification(project, owner, state):
    from tests.comparison.factories import placeholder_model

    return Classification.objects.create(project=project, model=placeholder_model(project), user=owner,
                                         texts=["paris"], state=state)


KINDS = {
    "training": (TrainingJob, lambda project, owner, state: make_job(project, owner, state=state)),
    "comparison": (Comparison, lambda project, owner, state: make_comparison(project, owner, state=state,
                                                                             outputs=False)),
    "import": (ImportJob, new_import),
    "derive": (DeriveJob, new_derive),
    "export": (ExportJob, new_export),
    "annotation export": (AnnotationExport, new_annotation_export),
    "suggestion run": (SuggestionRun, new_suggestion_run),
    "generation": (Generation, new_generation),
    "calibration": (SpeedMeasurement, new_calibration),
    "machine slot": (JobNode, new_machine_slot),
    "search index build": (SearchIndexJob, new_search_index_build),
    "judge run": (JudgeRun, new_judge_run),
    "eval run": (EvalRun, new_eval_run),
    "teacher run": (TeacherRun, new_teacher_run),
    "model export": (ModelExport, new_model_export),
    "precision measurement": (PrecisionMeasurement, new_precision_measurement),
    "classification": (Classification, new_classification),
}


def ask_to_cancel(model, pk):
    model.objects.filter(pk=pk).update(cancel_requested=True)


def stop_suggestions(model, pk):
    model.objects.filter(pk=pk).update(state="cancelled", finished_at=timezone.now())


# How each kind that can be cancelled is asked to stop, as its service asks.
CANCELS = {"training": ask_to_cancel, "comparison": ask_to_cancel, "import": ask_to_cancel, "derive": ask_to_cancel,
           "suggestion run": stop_suggestions, "judge run": ask_to_cancel,
           "eval run": ask_to_cancel, "teacher run": ask_to_cancel, "precision measurement": ask_to_cancel,
           "machine slot": cancel_the_slots_job}


def short_lease(settings):
    # A heartbeat every 0.1 s against a 2 s stale limit: a loaded CI machine (2 cores, the suite's
    # own workers) can pause the heartbeat thread for a second without the worker seeming dead.
    settings.TRAINING_HEARTBEAT_S, settings.TRAINING_HEARTBEAT_STALE_S, settings.TRAINING_MAX_RUNS = 0.1, 2.0, 3


@pytest.fixture(params=sorted(KINDS))
def kind(request, settings):
    short_lease(settings)
    return KINDS[request.param]


def claim_and_close(results, name, model, pk, worker):
    try:
        results[name] = JobRun.claim(model, pk, worker=worker)
    finally:  # a thread's pooled PostgreSQL connection goes back to the pool only when closed
        connection.close()


def claim_at_once(jobs: dict, worker: str) -> dict:
    """Each job claimed by `worker` on a thread of its own: claims that wait out the stale limit
    wait it together, not one kind after another."""
    results = {}
    threads = [threading.Thread(target=claim_and_close, args=(results, name, KINDS[name][0], job.pk, worker))
               for name, job in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


# Kinds whose waits run together: each live run's heartbeat thread and each duplicate claim hold a
# connection, and a process's PostgreSQL pool holds 10.
KINDS_AT_ONCE = 4
KIND_GROUPS = [sorted(KINDS)[i:i + KINDS_AT_ONCE] for i in range(0, len(KINDS), KINDS_AT_ONCE)]


@pytest.mark.parametrize("names", KIND_GROUPS, ids=", ".join)
def test_two_workers_given_the_same_message_one_runs_while_the_other_is_alive(names, project, owner, settings):
    short_lease(settings)
    jobs = {name: KINDS[name][1](project, owner, "queued") for name in names}
    firsts = {name: JobRun.claim(KINDS[name][0], job.pk, worker="a@host") for name, job in jobs.items()}
    assert {name: (run.job.state, run.job.runs, run.job.worker) for name, run in firsts.items()} == {
        name: ("running", 1, "a@host") for name in names}
    with contextlib.ExitStack() as alive:  # the first worker is alive: its heartbeats stay fresh
        for run in firsts.values():
            alive.enter_context(run)
        results = claim_at_once(jobs, "b@host")
    # Each duplicate waited past the stale limit, saw a live worker, and left.
    assert results == dict.fromkeys(names)
    for job in jobs.values():
        job.refresh_from_db()
    assert {name: (job.state, job.runs, job.worker) for name, job in jobs.items()} == {
        name: ("running", 1, "a@host") for name in names}


@pytest.mark.parametrize("names", KIND_GROUPS, ids=", ".join)
def test_a_job_whose_worker_died_is_taken_over_once_its_heartbeat_is_stale(names, project, owner, settings):
    short_lease(settings)
    jobs = {name: KINDS[name][1](project, owner, "queued") for name in names}
    for name, job in jobs.items():
        JobRun.claim(KINDS[name][0], job.pk, worker="a@host")  # and then a@host dies: no heartbeat
    taken = claim_at_once(jobs, "b@host")  # each waits out the stale limit
    assert {name: run and (run.job.state, run.job.runs, run.job.worker) for name, run in taken.items()} == {
        name: ("running", 2, "b@host") for name in names}


def test_a_job_lost_too_often_fails_with_the_reason_instead_of_looping(kind, project, owner):
    model, make = kind
    job = make(project, owner, "running")
    model.objects.filter(pk=job.pk).update(runs=3, heartbeat_at=timezone.now() - timezone.timedelta(seconds=60))
    assert JobRun.claim(model, job.pk, worker="c@host") is None
    job.refresh_from_db()
    assert job.state == "failed" and "was lost 3 times" in job.error and job.finished_at is not None


def test_an_ended_job_or_a_missing_one_is_never_run_again(kind, project, owner):
    model, make = kind
    done = make(project, owner, "succeeded")
    assert JobRun.claim(model, done.pk, worker="a@host") is None
    assert JobRun.claim(model, 10**9, worker="a@host") is None
    done.refresh_from_db()
    assert done.state == model.State.SUCCEEDED and done.runs == 0


def test_the_reaper_resends_only_what_went_silent(kind, project, owner):
    model, make = kind
    silent, alive, queued = (make(project, owner, state) for state in ("running", "running", "queued"))
    model.objects.filter(pk=silent.pk).update(heartbeat_at=timezone.now() - timezone.timedelta(seconds=60))
    model.objects.filter(pk=alive.pk).update(heartbeat_at=timezone.now())
    sent = []
    assert reap(model, sent.append) == 1
    assert sent == [silent.pk]


def test_every_leased_kind_is_in_this_suite_and_the_one_reaper_resends_each_to_its_task_and_queue(project, owner,
                                                                                                  settings):
    settings.TRAINING_HEARTBEAT_STALE_S = 1.0
    assert set(leased_kinds()) == {model for model, _ in KINDS.values()}
    silent = {}
    for model, make in KINDS.values():
        job = make(project, owner, "running")
        model.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timezone.timedelta(seconds=60))
        silent[model] = job.pk
    sent = []
    counts = reap_stale(lambda model, pk: sent.append((model.TASK, model.QUEUE, pk)))
    assert counts == {model._meta.label: 1 for model in silent}
    assert sorted(sent) == sorted((model.TASK, model.QUEUE, pk) for model, pk in silent.items())
    from workbench.celery import app

    app.loader.import_default_modules()
    assert {model.TASK for model in silent} <= set(app.tasks)  # each names a task that exists


def test_a_run_writes_its_progress_and_end_only_while_the_job_is_its_own(kind, project, owner):
    model, make = kind
    job = make(project, owner, "queued")
    published = []
    run = JobRun.claim(model, job.pk, worker="a@host", every_s=0,
                       publish=lambda job, **details: published.append((job.state, details)))
    with run:
        run.progress(3, 5, rows_per_s=2.0)
    assert published == [("running", {"rows_per_s": 2.0})]
    model.objects.filter(pk=job.pk).update(runs=2)  # another worker took it over
    assert run.finish() is False
    job.refresh_from_db()
    assert job.state == "running" and job.finished_at is None
    model.objects.filter(pk=job.pk).update(runs=1)
    assert run.fail("The file is broken.") is True
    job.refresh_from_db()
    assert (job.state, job.error) == ("failed", "The file is broken.") and job.finished_at is not None
    assert published[-1] == ("failed", {})
    if model.DONE_FIELD:
        assert getattr(job, model.DONE_FIELD) == 3
    if model.TOTAL_FIELD:
        assert getattr(job, model.TOTAL_FIELD) == 5


@pytest.mark.parametrize("name", sorted(CANCELS))
def test_a_run_asked_to_stop_stops_at_its_next_progress_and_ends_cancelled(name, project, owner):
    model, make = KINDS[name]
    job = make(project, owner, "queued")
    run = JobRun.claim(model, job.pk, worker="a@host", every_s=0)
    with run:
        run.progress(1, 10)
        assert not run.cancelled()
        CANCELS[name](model, job.pk)
        with pytest.raises(JobCancelled):
            run.progress(2, 10)
        run.cancel()
    job.refresh_from_db()
    assert job.state == "cancelled" and job.finished_at is not None
    if model.DONE_FIELD:
        assert getattr(job, model.DONE_FIELD) == 2  # the progress made is kept


class Broker:
    """Stands in for Celery's app where a message is sent again (a hand-back, the reaper)."""

    def __init__(self):
        self.sent = []

    def send_task(self, name, *, args, queue, priority=None):
        self.sent.append((name, args, queue, priority))


@pytest.fixture
def broker(monkeypatch):
    broker = Broker()
    monkeypatch.setattr(jobs, "current_app", broker)
    return broker


def test_a_run_whose_worker_is_stopping_hands_its_job_back_with_its_progress_and_another_takes_it(kind, project,
                                                                                                  owner, broker):
    model, make = kind
    job = make(project, owner, "queued")
    published = []
    run = JobRun.claim(model, job.pk, worker="stopping@host", every_s=0,
                       publish=lambda job, **details: published.append(job.state))
    with run:
        run.progress(3, 5)
        assert not run.stopping() and not run.should_stop()
        mark_worker_stopping("stopping@host")  # what its worker's warm shutdown does (apps.core.tasks)
        assert run.stopping() and run.should_stop() and not run.cancelled()
        assert run.hand_back() is True
    job.refresh_from_db()
    assert (job.state, job.worker, job.heartbeat_at, job.runs) == (model.State.QUEUED, "", None, 0)  # not lost
    if model.DONE_FIELD:
        assert getattr(job, model.DONE_FIELD) == 3  # the progress made is kept
    assert broker.sent == [(model.TASK, [job.pk], model.QUEUE, model.broker_priority(job.pk))]
    assert published[-1] == model.State.QUEUED
    assert run.finish() is False and run.hand_back() is False  # no longer this run's: nothing written or sent
    assert len(broker.sent) == 1
    taken = JobRun.claim(model, job.pk, worker="other@host")
    assert (taken.job.state, taken.job.runs, taken.job.worker) == ("running", 1, "other@host")
    assert not taken.stopping()


def test_a_cancel_wins_over_a_stopping_worker(project, owner):
    model, make = KINDS["comparison"]
    job = make(project, owner, "queued")
    run = JobRun.claim(model, job.pk, worker="stopping@host", every_s=0)
    mark_worker_stopping("stopping@host")
    ask_to_cancel(model, job.pk)
    assert run.should_stop() and run.cancelled() and run.stopping()


@pytest.mark.parametrize("priority, step", [("LOW", 6), ("NORMAL", 3), ("HIGH", 0)])
def test_a_fine_tune_sent_again_keeps_its_priority_whether_handed_back_or_reaped(project, owner, broker, settings,
                                                                                 priority, step):
    """Without one, kombu's Redis transport serves a message as priority 0: a low-priority job sent
    again would overtake every high-priority one."""
    settings.TRAINING_HEARTBEAT_STALE_S = 1.0
    job = make_job(project, owner, state="queued", priority=TrainingJob.Priority[priority])
    run = JobRun.claim(TrainingJob, job.pk, worker="stopping@host")
    run.hand_back()
    TrainingJob.objects.filter(pk=job.pk).update(state="running", heartbeat_at=timezone.now()
                                                 - timezone.timedelta(seconds=60))
    reap_stale()
    assert broker.sent == [("training.run", [job.pk], "gpu", step)] * 2
