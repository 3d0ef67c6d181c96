"""Which training worker can take which job: workers advertise their devices, jobs are routed by them.

A `gpu` worker counts its devices once at start (`worker_devices`: TRAINING_WORKER_DEVICES when set,
else the GPUs CUDA_VISIBLE_DEVICES leaves it, else the machine's GPUs, else its CPU cores for gloo)
and advertises them: a TrainingWorker row, refreshed every ADVERTISE_EVERY_S by a thread of its main
process and removed at a clean stop (a killed worker's row goes stale and stops counting).

Routing is Celery's own: a job needing N > 1 devices is sent to the queue `gpu.devices-N`
(`job_queue`), and a worker with D devices consumes `gpu` and `gpu.devices-2` … `gpu.devices-D`
(added at start, `_consume_device_queues`), so only a worker with at least N devices ever receives
it; the broker's priorities hold within each queue. A message that still reaches a worker with too
few devices (sent by hand, or by an older release to plain `gpu`) is left for another: the runner
sends it on to its device queue without claiming it, so no run is counted (`runner.run_job`).
A queued job that no online worker can fit says so (`waiting_reason`).
"""

from __future__ import annotations

import glob
import logging
import os
import threading

from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown
from django.conf import settings
from django.db import connection
from django.utils import timezone

logger = logging.getLogger(__name__)

GPU_QUEUE = "gpu"
ADVERTISE_EVERY_S = 10.0
# A row older than this is a worker that went away without saying so (killed, machine lost).
ADVERTISE_STALE_S = 45.0


def job_queue(devices: int) -> str:
    """The queue of a job needing `devices` devices: plain `gpu` for one, else `gpu.devices-N`."""
    return GPU_QUEUE if devices <= 1 else f"{GPU_QUEUE}.devices-{devices}"


def worker_devices() -> int:
    """The devices this training worker has: settings.TRAINING_WORKER_DEVICES when set (> 0), else the
    GPUs CUDA_VISIBLE_DEVICES names, else this machine's GPUs, else its CPU cores (gloo processes).
    Counted without importing torch (the worker's main process forks its pool)."""
    if settings.TRAINING_WORKER_DEVICES > 0:
        return settings.TRAINING_WORKER_DEVICES
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = (len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"]) if visible is not None
            else len(glob.glob("/dev/nvidia[0-9]*")))
    if gpus:
        return gpus
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def advertise(hostname: str, devices: int) -> None:
    from apps.training.models import TrainingWorker

    TrainingWorker.objects.update_or_create(hostname=hostname[:200], defaults={"devices": devices,
                                                                                "seen_at": timezone.now()})


def withdraw(hostname: str) -> None:
    from apps.training.models import TrainingWorker

    TrainingWorker.objects.filter(hostname=hostname[:200]).delete()


def online_devices() -> dict[str, int]:
    """Devices of every training worker seen within ADVERTISE_STALE_S, by hostname."""
    from apps.training.models import TrainingWorker

    since = timezone.now() - timezone.timedelta(seconds=ADVERTISE_STALE_S)
    return dict(TrainingWorker.objects.filter(seen_at__gte=since).values_list("hostname", "devices"))


def waiting_reason(job) -> str:
    """Why a queued job cannot start now when no online training worker can fit it; "" otherwise (it
    waits only for its turn)."""
    if job.state != job.State.QUEUED:
        return ""
    needs = job.devices
    online = online_devices()
    if not online:
        return "No training worker is online; the job waits for one."
    most = max(online.values())
    if most >= needs:
        return ""
    return (f"Waiting for a worker with {needs} devices: the training workers online have at most {most} "
            f"({len(online)} worker{'' if len(online) == 1 else 's'}).")


# --- in a training worker ------------------------------------------------------------------------

class _Advertiser:
    """A thread of the worker's main process that keeps its TrainingWorker row fresh."""

    def __init__(self, hostname: str, devices: int) -> None:
        self.hostname, self.devices = hostname, devices
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="training-advertise")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            withdraw(self.hostname)
        except Exception:  # the row goes stale by itself
            logger.warning("could not withdraw training worker %s", self.hostname)
        finally:
            connection.close()

    def _run(self) -> None:
        while True:
            try:
                advertise(self.hostname, self.devices)
            except Exception as exc:  # the worker goes on; its row goes stale until the next write
                logger.warning("could not advertise this training worker: %s", exc)
            finally:
                connection.close()  # the pool forks from this process: hold no connection between writes
            if self._stop.wait(ADVERTISE_EVERY_S):
                return


_advertiser: _Advertiser | None = None


def _consumes_gpu(worker) -> bool:
    return GPU_QUEUE in worker.app.amqp.queues.consume_from


@celeryd_after_setup.connect
def _consume_device_queues(sender=None, instance=None, **_) -> None:
    # After -Q applied: a gpu worker also consumes the queues of the jobs its devices fit.
    if instance is None or not _consumes_gpu(instance):
        return
    for devices in range(2, worker_devices() + 1):
        instance.app.amqp.queues.select_add(job_queue(devices))


@worker_ready.connect
def _start_advertising(sender=None, **_) -> None:
    global _advertiser
    if _advertiser is not None or sender is None or GPU_QUEUE not in sender.app.amqp.queues.consume_from:
        return
    _advertiser = _Advertiser(sender.hostname, worker_devices())
    _advertiser.start()


@worker_shutdown.connect
def _stop_advertising(sender=None, **_) -> None:
    global _advertiser
    if _advertiser is not None:
        _advertiser.stop()
        _advertiser = None
