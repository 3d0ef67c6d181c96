"""Jobs across machines (config `nodes` M > 1): one gpu worker per machine, meeting in torchrun's c10d
rendezvous (workers.training.distributed, Rendezvous).

The worker that claims the job (its ordinary lease, apps.core.jobs) is node 0: `open_run` picks a free
port on WORKER_RENDEZVOUS_HOST, records the endpoint and a new run id on the job row, writes M-1 slots
(JobNode rows, each a job under the lease of its own: claim, heartbeat, reaper) and sends one message
per slot on the job's device queue. Each further gpu worker that receives one claims the slot (`join`)
and starts its torchrun on the same endpoint and run id. c10d assigns the node ranks: the worker whose
machine got global rank 0 relays the metrics and checkpoints and ends the job (success, cancel); the
others' torchruns end cleanly (ReportedElsewhere) and node 0 keeps the job's heartbeat until it ended.

A node whose peers do not all come within TRAINING_RENDEZVOUS_TIMEOUT_S stops before any step: node 0
fails the job with that reason (its slots not yet taken are cancelled, so nothing is left half-started);
a joining node fails its slot. A slot whose run is over (the job ended, or a new run opened new slots)
ends at its next check. Cancelling the job reaches every node: each caller asks should_stop and writes
its own STOP file, and the ranks all-reduce the flag (workers.training.loop). A worker of the run told to
stop (SIGTERM) stops every machine the same way, and the job is handed back instead of cancelled. A
machine that dies ends the run everywhere; node 0 queues the job again (`run_again`).
"""

from __future__ import annotations

import logging
import socket
import time
import traceback
import uuid

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from apps.core.jobs import JobRun, send_job
from apps.training.models import JobNode, TrainingJob
from apps.training.runner import JobCallbacks, _succeed, engine_arguments
from workers.training.distributed import Rendezvous

logger = logging.getLogger(__name__)

# How long node 0 keeps the job's heartbeat after its ranks ended cleanly, for the worker of global rank 0
# to relay the last events and end the job (it stops relaying within a second of its ranks' exit).
END_WAIT_S = 300.0


def free_port(host: str) -> int:
    """A port free on `host` now (the c10d store binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host not in ("localhost",) else "127.0.0.1", 0))
        return sock.getsockname()[1]


def new_run_id(job: TrainingJob) -> str:
    """A rendezvous id of its own for a new run of `job` (c10d keeps one run's state under it)."""
    return f"job-{job.pk}-{uuid.uuid4().hex[:12]}"


def open_run(job: TrainingJob) -> Rendezvous:
    """Node 0's side: a new rendezvous for this run of `job` (its endpoint and run id on the row) and its
    nodes-1 slots, whose messages are sent once committed. Returns the rendezvous, as host."""
    host = settings.WORKER_RENDEZVOUS_HOST
    endpoint = f"{host}:{free_port(host)}"
    run_id = new_run_id(job)
    with transaction.atomic():
        TrainingJob.objects.filter(pk=job.pk).update(rendezvous_endpoint=endpoint, rendezvous_id=run_id)
        job.rendezvous_endpoint, job.rendezvous_id = endpoint, run_id
        JobNode.objects.filter(job=job, state=JobNode.State.QUEUED).update(state=JobNode.State.CANCELLED,
                                                                           finished_at=timezone.now())
        slots = JobNode.objects.bulk_create([JobNode(job=job, slot=slot, rendezvous_id=run_id)
                                             for slot in range(1, job.nodes)])
        for slot in slots:
            transaction.on_commit(lambda pk=slot.pk: send_job(JobNode, pk))
    logger.info("job %s: rendezvous %s (run %s), %s more machines asked for", job.pk, endpoint, run_id,
                job.nodes - 1)
    return Rendezvous(endpoint=endpoint, run_id=run_id, is_host=True)


def close_run(job: TrainingJob) -> None:
    """Cancel the slots of this run of `job` that no worker took (node 0 ended: nothing may start after it)."""
    JobNode.objects.filter(job=job, rendezvous_id=job.rendezvous_id, state=JobNode.State.QUEUED).update(state=JobNode.State.CANCELLED,
                                                                       finished_at=timezone.now())


def run_again(run: JobRun, callbacks: JobCallbacks, reason: str) -> bool:
    """A machine of the run died (its ranks, its worker) and the others' torchruns ended with it: queue the
    job again, for a new run with a new rendezvous that resumes from the newest checkpoint any machine has
    (the ranks share it before training). Counted as a run: after TRAINING_MAX_RUNS the job fails
    instead (False: the caller fails it)."""
    job = run.job
    if job.runs >= settings.TRAINING_MAX_RUNS:
        return False
    callbacks.log(f"a machine of the run failed ({reason.splitlines()[0][:300]}); queued again to resume from the "
                  "last checkpoint")
    written = TrainingJob.objects.filter(pk=job.pk, runs=job.runs, state=TrainingJob.State.RUNNING).update(
        state=TrainingJob.State.QUEUED, worker="", heartbeat_at=None)
    if written:
        job.state, job.worker, job.heartbeat_at = TrainingJob.State.QUEUED, "", None
        transaction.on_commit(lambda: send_job(TrainingJob, job.pk))
    return bool(written)


def wait_for_the_end(job: TrainingJob) -> None:
    """Node 0, whose ranks ended cleanly while global rank 0 was on another machine: keep the job's lease
    (the heartbeat runs on) until that machine's worker ended the job, at most END_WAIT_S."""
    deadline = time.monotonic() + END_WAIT_S
    while time.monotonic() < deadline:
        if not TrainingJob.objects.filter(pk=job.pk, state=TrainingJob.State.RUNNING).exists():
            return
        time.sleep(0.5)
    logger.warning("job %s: the machine with global rank 0 did not end the job within %s s", job.pk, END_WAIT_S)


def join(node_id: int, *, worker: str, pid: int) -> None:
    """A further machine's side: claim the slot, then run this node of the job's current run."""
    from apps.training import events

    run = JobRun.claim(JobNode, node_id, worker=worker, what="machine of a job", every_s=0)
    if run is None:
        return
    node = run.job
    if JobNode.cancel_asked(node.pk):  # its run is over before it started here
        run.cancel()
        return
    with run:
        job = TrainingJob.objects.get(pk=node.job_id)
        job_run = JobRun(job, publish=lambda job, **_: events.job_state(job), every_s=0)
        _run_node(run, job_run, node)


def _run_node(run: JobRun, job_run: JobRun, node: JobNode) -> None:
    from apps.registry.services import adapter_lineage
    from apps.training.capacity import worker_devices
    from apps.training.speed import preload_engine
    from workers.training import TrainCancelled
    from workers.training.distributed import ReportedElsewhere, train_distributed

    job = job_run.job
    preload_engine()
    callbacks = _NodeCallbacks(job, job_run, run)
    try:
        lineage = adapter_lineage(job)
        callbacks.start_clock()
        config, arguments = engine_arguments(job, callbacks, lineage)
        rendezvous = Rendezvous(endpoint=job.rendezvous_endpoint, run_id=node.rendezvous_id, is_host=False)
        result = train_distributed(config, devices_here=worker_devices(), rendezvous=rendezvous,
                                   rendezvous_timeout_s=settings.TRAINING_RENDEZVOUS_TIMEOUT_S, **arguments)
    except ReportedElsewhere:
        close_old_connections()
        run.finish()
        return
    except TrainCancelled as exc:  # global rank 0 was here: this worker ends the job
        close_old_connections()
        if TrainingJob.cancel_asked(job.pk):
            callbacks.log(f"cancelled at step {exc.step}")
            job_run.cancel()
        else:  # a machine's worker is stopping (a rolling update): the job resumes on a new run
            callbacks.log(f"handed back at step {exc.step}: a worker of the run is stopping; another resumes it")
            job_run.hand_back()
        run.finish()
        return
    except Exception as exc:  # a rendezvous timeout: the slot fails; node 0 fails the job with its own reason
        logger.exception("job %s: machine slot %s failed", job.pk, node.slot)
        close_old_connections()
        run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        return
    timing = {"rows": arguments["train_rows"], "setup_s": callbacks.setup_s, "eval_seconds": callbacks.eval_seconds}
    try:
        _succeed(job_run, result, timing, bucket_prefix="")
    except Exception as exc:
        logger.exception("job %s: recording its end failed", job.pk)
        close_old_connections()
        job_run.fail(f"{type(exc).__name__}: {exc}"[:2000], traceback=traceback.format_exc())
    run.finish()


class _NodeCallbacks(JobCallbacks):
    """The job's callbacks on a further machine: they also stop when the slot's run is over."""

    def __init__(self, job: TrainingJob, job_run: JobRun, slot_run: JobRun) -> None:
        super().__init__(job, job_run)
        self.slot_run = slot_run

    def should_stop(self) -> bool:
        """The job was cancelled, the slot's run is over, or this machine's worker is told to stop (then
        every machine stops at the same step with a checkpoint and the job is handed back)."""
        return self.slot_run.cancelled() or self.run.cancelled() or self.slot_run.stopping()
