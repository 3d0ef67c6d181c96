"""Long work: sending it to Celery, and the lease that makes exactly one worker run a job.
Every job row is created first; its task gets only the id."""

import logging
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from celery import current_app
from django.apps import apps as django_apps
from django.conf import settings
from django.core.cache import cache
from django.db import connection, models, transaction
from django.db.models import F
from django.utils import timezone

from apps.core.errors import Conflict

logger = logging.getLogger(__name__)


def enqueue(task, job_id: int, *, queue: str, on_failure: Callable[[str], None], priority: int | None = None) -> None:
    """Send `task(job_id)` to `queue`. When the broker cannot take it, `on_failure(reason)` marks
    the job failed with a reason a person can read, rather than leave it queued forever.
    `priority`: with Redis, 0 is served first (kombu's steps 0, 3, 6, 9)."""
    try:
        task.apply_async(args=[job_id], queue=queue, **({"priority": priority} if priority is not None else {}))
    except Exception as exc:
        logger.exception("could not queue %s for job %s", task.name, job_id)
        on_failure(f"Could not queue the job: {type(exc).__name__}")


class JobState(models.TextChoices):
    """The states of a job that can be cancelled (kinds with fewer or more declare their own)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING)
ENDED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


def ask_to_cancel(model: type[models.Model], pk: int, *, what: str, ends_at_once=(JobState.QUEUED,)):
    """A person's cancel, in the caller's transaction: a job in `ends_at_once` (not yet taken by a
    worker) is cancelled now; a RUNNING one gets `cancel_requested` and its worker stops it at its
    next check. Conflict when it has already ended. Returns the row, locked and saved."""
    job = model.objects.select_for_update().get(pk=pk)
    if job.state in ends_at_once:
        job.state, job.finished_at = model.State.CANCELLED, timezone.now()
    elif job.state != model.State.RUNNING:
        raise Conflict(f"This {what} already {job.state}.")
    job.cancel_requested = True
    job.save(update_fields=["state", "finished_at", "cancel_requested"])
    return job


# --- the lease: exactly one worker runs a job ---------------------------------------------------


class LeasedJob(models.Model):
    """What a job row needs so that exactly one worker runs it, even when the broker hands the
    same message to two (tasks are acknowledged late and redelivered when a worker dies).

    A worker claims a QUEUED job by moving it to RUNNING, counting a run and naming itself; while
    it works, a heartbeat thread keeps `heartbeat_at` fresh. Another worker may take a RUNNING job
    over only once that heartbeat is stale (the first worker died); a job whose worker was lost
    JOB_MAX_RUNS times fails instead of looping. Subclasses declare `state` with its `State` (with
    QUEUED, RUNNING, FAILED) and `ENDED`, and name the Celery task that runs one (`TASK`, its only
    argument the row's id) and its queue (`QUEUE`), which the reaper uses. Their `Meta` derives from
    this one (newest first).
    """

    TASK: ClassVar[str] = ""
    QUEUE: ClassVar[str] = "default"
    # The row's fields that a JobRun's progress(done, total) writes; "" where the kind keeps none.
    DONE_FIELD: ClassVar[str] = ""
    TOTAL_FIELD: ClassVar[str] = ""

    runs = models.PositiveIntegerField(default=0)  # claims by a worker: 2+ means it was taken over after a loss
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # kept fresh by the worker running it
    started_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)  # a plain one-line summary for whoever launched it

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]

    @property
    def is_active(self) -> bool:
        """Queued or running: the subclass's ACTIVE states (pages poll while it is)."""
        return self.state in getattr(self, "ACTIVE", ())

    @classmethod
    def broker_priority(cls, pk: int) -> int | None:
        """The priority the job's message is sent with (None: the broker's default), by its service
        and again by a hand-back or the reaper, so a message sent again keeps its place among the
        queue's priorities. With Redis, 0 is served first (kombu's steps 0, 3, 6, 9); a message
        without one is served as 0. A kind with priorities overrides this."""
        return None

    @classmethod
    def broker_queue(cls, pk: int) -> str:
        """The queue the job's message is sent to, by its service and again by a hand-back or the reaper:
        QUEUE, unless the kind routes each job by what it needs (fine-tunes: by their devices)."""
        return cls.QUEUE

    @classmethod
    def cancel_asked(cls, pk: int) -> bool:
        """Whether the job asks its worker to stop: its `cancel_requested` flag, where the kind has one
        (a kind stopped another way says so by overriding this)."""
        if not any(field.name == "cancel_requested" for field in cls._meta.concrete_fields):
            return False
        return cls.objects.filter(pk=pk, cancel_requested=True).exists()


def _stale_before():
    return timezone.now() - timezone.timedelta(seconds=settings.TRAINING_HEARTBEAT_STALE_S)


def _claim(model: type[LeasedJob], pk: int, *, worker: str, what: str = "job",
          on_given_up: Callable[[LeasedJob], None] | None = None, **claimed_fields) -> LeasedJob | None:
    """Take the job for this worker, or None when it is not this worker's to run: ended, deleted,
    or RUNNING under a live heartbeat (a duplicate message). A RUNNING job whose heartbeat is
    fresh may belong to a worker that has just died (a redelivery comes at once), so the claim
    waits up to the stale limit to find out. `claimed_fields` are set on the row as it is taken."""
    deadline = time.monotonic() + settings.TRAINING_HEARTBEAT_STALE_S + 5
    while True:
        with transaction.atomic():
            job = model.objects.select_for_update().filter(pk=pk).first()
            if job is None or job.state in model.ENDED:
                return None
            orphaned = job.state == model.State.RUNNING and (job.heartbeat_at is None
                                                             or job.heartbeat_at < _stale_before())
            if job.state == model.State.QUEUED or orphaned:
                if orphaned and job.runs >= settings.TRAINING_MAX_RUNS:
                    job.state, job.finished_at = model.State.FAILED, timezone.now()
                    job.error = (f"The worker running this {what} was lost {job.runs} times (out of memory, or the "
                                 "machine went away); it was not retried again.")
                    job.save(update_fields=["state", "finished_at", "error"])
                    if on_given_up:
                        on_given_up(job)
                    return None
                job.state, job.runs = model.State.RUNNING, job.runs + 1
                job.worker, job.heartbeat_at = worker[:200], timezone.now()
                job.started_at = job.started_at or timezone.now()
                for name, value in claimed_fields.items():
                    setattr(job, name, value)
                job.save(update_fields=["state", "runs", "worker", "heartbeat_at", "started_at", *claimed_fields])
                return job
        if time.monotonic() > deadline:
            return None
        time.sleep(min(1.0, settings.TRAINING_HEARTBEAT_STALE_S / 4))


class _Heartbeat:
    """A thread that keeps a claimed job's heartbeat fresh while this worker runs it, however long
    one step of the work takes. It writes only while the row is still this run's."""

    def __init__(self, job: LeasedJob) -> None:
        self.model, self.pk, self.runs = type(job), job.pk, job.runs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name=f"heartbeat-{self.model._meta.model_name}-{self.pk}")

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(settings.TRAINING_HEARTBEAT_S):
                self.model.objects.filter(pk=self.pk, runs=self.runs, state=self.model.State.RUNNING).update(
                    heartbeat_at=timezone.now())
        except Exception:  # the work goes on; a stale heartbeat only invites a takeover
            logger.exception("heartbeat of %s %s stopped", self.model._meta.model_name, self.pk)
        finally:
            connection.close()


class JobCancelled(Exception):
    """Raised by JobRun.progress once the job asks to be stopped (LeasedJob.cancel_asked)."""


PROGRESS_EVERY_S = 0.5  # a run writes and publishes its progress, and reads the cancel flag, at most this often


class JobRun:
    """One worker's run of a claimed job: what every kind shares from the claim to the end. The
    heartbeat while it runs; the progress and cancel callbacks handed to the engine (bound methods,
    plain callables: the engine knows no Django); and the end (state, finished_at, the kind's fields)
    written once and published.

        run = JobRun.claim(ExportJob, job_id, worker=worker, what="export", publish=events.progress)
        if run is None:
            return  # not this worker's to run
        with run:  # the heartbeat
            try:
                result = engine(..., progress=run.progress)  # or should_stop=run.cancelled
            except JobCancelled:
                run.cancel()
            except Exception as exc:
                run.fail(f"{type(exc).__name__}: {exc}")
            else:
                run.finish(path=result.path)

    Progress and the end are written only while the row is still this run's (RUNNING, with this
    run's count of claims): a run taken over by another worker, or stopped by a person (a state
    written by the service), never overwrites what came after it; a stop keeps the progress made.
    `publish(job, **details)` sends the kind's live event: after each progress write (with the
    details given to progress), after the end is committed, and after a hand-back.

    A kind whose work has steps it can resume from (a checkpoint, stored cells) also hands its job
    back when its worker is told to stop (SIGTERM: a rolling update, a scale-down): the engine
    polls `run.should_stop` (a cancel, or the worker stopping), or the runner asks `run.stopping()`
    at its step boundary, and then

            except JobCancelled:   # or the engine's own stop
                if run.stopping() and not run.cancelled():
                    run.hand_back()  # queued again, its progress kept; another worker resumes it
                else:
                    run.cancel()
    """

    def __init__(self, job: LeasedJob, *, publish: Callable[..., None] | None = None,
                 every_s: float = PROGRESS_EVERY_S) -> None:
        self.job, self.model = job, type(job)
        self._publish = publish or (lambda job, **details: None)
        self._every_s = every_s
        self._written_at: float | None = None
        self._checked_at: float | None = None
        self._cancelled = False
        self._stop_checked_at: float | None = None
        self._stopping = False
        self._heartbeat = _Heartbeat(job)

    @classmethod
    def claim(cls, model: type[LeasedJob], pk: int, *, worker: str, what: str = "job",
              on_given_up: Callable[[LeasedJob], None] | None = None, publish: Callable[..., None] | None = None,
              every_s: float = PROGRESS_EVERY_S, **claimed_fields) -> "JobRun | None":
        """Take the job for this worker: a run of it, or None when it is not this worker's to run
        (ended, deleted, or RUNNING under a live heartbeat: a duplicate message). A RUNNING job
        whose heartbeat is stale is taken over (its `runs` then counts 2+); one lost JOB_MAX_RUNS
        times fails instead (`on_given_up(job)` is called). `claimed_fields` are set as it is taken."""
        job = _claim(model, pk, worker=worker, what=what, on_given_up=on_given_up, **claimed_fields)
        return None if job is None else cls(job, publish=publish, every_s=every_s)

    def __enter__(self) -> "JobRun":
        self._heartbeat.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._heartbeat.__exit__(*exc)

    def _this_run(self):
        return self.model.objects.filter(pk=self.job.pk, runs=self.job.runs)

    def _progress_fields(self) -> dict:
        return {name: getattr(self.job, name) for name in (self.model.DONE_FIELD, self.model.TOTAL_FIELD) if name}

    def cancelled(self) -> bool:
        """Whether the job asks to be stopped, read at most every `every_s` (the first ask reads at
        once): for an engine that polls (`should_stop`, `is_cancelled`), from any of its threads."""
        now = time.monotonic()
        if not self._cancelled and (self._checked_at is None or now - self._checked_at >= self._every_s):
            self._checked_at = now
            try:
                self._cancelled = self.model.cancel_asked(self.job.pk)
            except Exception:  # on an engine's own thread: drop a broken connection, the next ask opens one
                connection.close()
                raise
        return self._cancelled

    def stopping(self) -> bool:
        """Whether this run's worker was told to stop (a warm shutdown: SIGTERM), read at most every
        `every_s` (the first ask reads at once; once told, always): the run then hands its job back
        (`hand_back`) at its next step boundary instead of holding the stop up, or finishes what it
        cannot resume. From any of the engine's threads."""
        now = time.monotonic()
        if not self._stopping and (self._stop_checked_at is None or now - self._stop_checked_at >= self._every_s):
            self._stop_checked_at = now
            self._stopping = _worker_stopping(self.job.worker)
        return self._stopping

    def should_stop(self) -> bool:
        """The engine's poll for a kind that hands back: a person asked to stop it (`cancelled`), or
        its worker is stopping (`stopping`). Once the engine stopped, the runner tells which."""
        return self.cancelled() or self.stopping()

    def progress(self, done: int, total: int | None = None, **details) -> None:
        """The progress callback handed to the engine: `done` (and `total`) kept in the kind's
        DONE_FIELD and TOTAL_FIELD, written and published at most every `every_s`; raises JobCancelled
        once the job asks to be stopped."""
        if self.model.DONE_FIELD:
            setattr(self.job, self.model.DONE_FIELD, done)
        if total is not None and self.model.TOTAL_FIELD:
            setattr(self.job, self.model.TOTAL_FIELD, total)
        now = time.monotonic()
        if self._written_at is not None and now - self._written_at < self._every_s:
            return
        self._written_at = now
        if progress := self._progress_fields():
            self._this_run().filter(state=self.model.State.RUNNING).update(**progress)
        if self.cancelled():
            raise JobCancelled()
        self._publish(self.job, **details)

    def finish(self, **fields) -> bool:
        """The job succeeded: its state, finished_at, the last progress and `fields` written."""
        return self._end(self.model.State.SUCCEEDED, fields)

    def fail(self, error: str, **fields) -> bool:
        return self._end(self.model.State.FAILED, {"error": error, **fields})

    def cancel(self, **fields) -> bool:
        return self._end(self.model.State.CANCELLED, fields)

    def hand_back(self, **fields) -> bool:
        """Return the job to the queue, its progress and `fields` kept, and send its message again
        (with its kind's priority) once committed, so another worker, or this one restarted,
        resumes it; then publish it, QUEUED. Not a lost worker: the claim that takes it next is not
        counted toward JOB_MAX_RUNS. False when the row was no longer this run's (taken over,
        stopped by a person, deleted): nothing is written or sent."""
        model, pk = self.model, self.job.pk
        fields = {**self._progress_fields(), **fields}
        written = self._this_run().filter(state=model.State.RUNNING).update(
            **fields, state=model.State.QUEUED, worker="", heartbeat_at=None, runs=F("runs") - 1)
        if not written:
            return False
        for name, value in fields.items():
            setattr(self.job, name, value)
        self.job.state, self.job.worker, self.job.heartbeat_at = model.State.QUEUED, "", None
        self.job.runs -= 1

        def sent_again() -> None:
            send_job(model, pk)
            self._publish(self.job)

        transaction.on_commit(sent_again)
        return True

    def _end(self, state: str, fields: dict) -> bool:
        """Write the end while the row is still this run's, then publish it once committed. False
        when it was not: taken over, deleted, or stopped by a person (the progress made is kept)."""
        fields = {**self._progress_fields(), **fields, "state": state, "finished_at": timezone.now()}
        written = self._this_run().filter(state=self.model.State.RUNNING).update(**fields)
        if written:
            for name, value in fields.items():
                setattr(self.job, name, value)
        else:
            if progress := self._progress_fields():
                self._this_run().update(**progress)
            current = self.model.objects.filter(pk=self.job.pk).first()
            if current is None:
                return False
            self.job.state, self.job.finished_at = current.state, current.finished_at
        transaction.on_commit(lambda: self._publish(self.job))
        return bool(written)


# --- hand-back: a worker that is told to stop (SIGTERM: a rolling update, a scale-down, a
# container stop) returns its long jobs to the queue at the next step instead of holding the stop
# up for hours or being killed mid-step (JobRun.stopping, JobRun.hand_back). Celery tells only its
# main process (worker_shutting_down, apps.core.tasks); the task runs in a pool process, so the word
# is passed through the shared cache.

STOPPING_KEEP_S = 24 * 3600


def _stopping_key(worker: str) -> str:
    return f"worker-stopping:{worker}"


def mark_worker_stopping(worker: str) -> None:
    cache.set(_stopping_key(worker), 1, STOPPING_KEEP_S)


def clear_worker_stopping(worker: str) -> None:
    cache.delete(_stopping_key(worker))


def _worker_stopping(worker: str) -> bool:
    """Whether the worker named `worker` (its Celery hostname) was told to stop (JobRun.stopping)."""
    return bool(worker) and cache.get(_stopping_key(worker)) is not None


def leased_kinds() -> list[type[LeasedJob]]:
    """Every job kind that runs under the lease (the concrete subclasses of LeasedJob)."""
    return [model for model in django_apps.get_models() if issubclass(model, LeasedJob)]


def send_job(model: type[LeasedJob], pk: int) -> None:
    """Send the job's message again (a hand-back, the reaper, a worker leaving it for another), to the
    queue and with the priority its service sent it with."""
    priority = model.broker_priority(pk)
    current_app.send_task(model.TASK, args=[pk], queue=model.broker_queue(pk),
                          **({"priority": priority} if priority is not None else {}))


def reap_stale(send: Callable[[type[LeasedJob], int], None] = send_job) -> dict[str, int]:
    """The one reaper, run by beat: for every job kind, send again the message of each RUNNING
    job whose worker went silent. Returns how many per kind (its model label)."""
    return {model._meta.label: reap(model, lambda pk, model=model: send(model, pk)) for model in leased_kinds()}


def reap(model: type[LeasedJob], send: Callable[[int], None]) -> int:
    """Send again the message of every RUNNING job whose worker went silent (a whole machine lost,
    so no redelivery came): `JobRun.claim` then takes it over. Returns how many."""
    stale = list(model.objects.filter(state=model.State.RUNNING, heartbeat_at__lt=_stale_before())
                 .values_list("pk", flat=True))
    for pk in stale:
        send(pk)
    return len(stale)
