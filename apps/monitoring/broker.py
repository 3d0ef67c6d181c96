"""What the Celery broker and the workers say right now: who answers, what they consume and
run, how many messages wait. Every call here is bounded in time, because the monitoring page
and /metrics call it inside a request and must answer even when the broker does not.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from workbench.celery import app as celery_app

# A worker answers a ping within milliseconds, but a broadcast cannot know how many workers
# exist, so the ping always waits this long for late answers. The follow-up questions go to
# the workers that answered and return as soon as all of them did.
INSPECT_TIMEOUT_S = 1.0
# Publishing a control message retries a dead broker for several seconds; the page stops
# waiting after this long and says the broker did not answer.
INSPECT_DEADLINE_S = 4 * INSPECT_TIMEOUT_S + 1
BROKER_TIMEOUT_S = 1.0
# A broker that hangs holds at most these two threads; later calls wait out the deadline too.
_inspect_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="monitoring-inspect")


@dataclass
class ActiveTask:
    name: str
    task_id: str
    args: list
    started_at: float | None  # epoch seconds


@dataclass
class WorkerState:
    hostname: str
    queues: list[str] = field(default_factory=list)
    active: list[ActiveTask] = field(default_factory=list)
    concurrency: int | None = None
    pid: int | None = None
    uptime_s: int | None = None


@dataclass
class Inspection:
    reachable: bool  # False: the broker could not be asked at all (see error)
    workers: list[WorkerState] = field(default_factory=list)
    error: str = ""
    asked_at: float = field(default_factory=time.time)  # epoch seconds: when the question went out


def _broker_connection():
    """A fresh broker connection that gives up after BROKER_TIMEOUT_S, with no retries."""
    conn = celery_app.connection_for_read(transport_options={"socket_timeout": BROKER_TIMEOUT_S,
                                                             "socket_connect_timeout": BROKER_TIMEOUT_S})
    try:
        conn.ensure_connection(max_retries=0, timeout=BROKER_TIMEOUT_S)
    except BaseException:
        conn.release()
        raise
    return conn


def _inspect(timeout: float) -> Inspection:
    # A down broker is found here in at most BROKER_TIMEOUT_S; the broadcast below would
    # retry it for several seconds.
    _broker_connection().release()
    control = celery_app.control
    pongs = control.inspect(timeout=timeout).ping() or {}
    names = sorted(pongs)
    if not names:
        return Inspection(reachable=True)
    inspector = control.inspect(destination=names, timeout=timeout)  # waits for len(names) replies at most
    queues = inspector.active_queues() or {}
    active = inspector.active() or {}
    stats = inspector.stats() or {}
    workers = []
    for name in names:
        worker_stats = stats.get(name) or {}
        workers.append(WorkerState(
            hostname=name,
            queues=sorted(q["name"] for q in queues.get(name) or []),
            active=[ActiveTask(name=t.get("name", "?"), task_id=t.get("id", ""), args=list(t.get("args") or []),
                               started_at=t.get("time_start")) for t in active.get(name) or []],
            concurrency=(worker_stats.get("pool") or {}).get("max-concurrency"),
            pid=worker_stats.get("pid"), uptime_s=worker_stats.get("uptime")))
    return Inspection(reachable=True, workers=workers)


def inspect_workers(timeout: float = INSPECT_TIMEOUT_S) -> Inspection:
    """The workers that answer a ping, with their queues, running tasks, concurrency and pid.
    Never raises; never takes much longer than INSPECT_DEADLINE_S."""
    future = _inspect_threads.submit(_inspect, timeout)
    try:
        return future.result(timeout=INSPECT_DEADLINE_S)
    except FutureTimeout:
        future.cancel()  # still queued behind hung calls: never start it
        return Inspection(reachable=False, error="the broker did not answer in time")
    except Exception as exc:  # a monitoring read reports any broker failure, it never raises
        return Inspection(reachable=False, error=f"broker error: {type(exc).__name__}")


@dataclass
class QueueDepths:
    reachable: bool
    waiting: dict[str, int] = field(default_factory=dict)  # queue -> messages not yet taken by a worker
    unacked: int | None = None  # taken by a worker, not yet acknowledged (all queues; Redis only)
    error: str = ""


def _redis_list_names(channel, queue: str) -> list[str]:
    # kombu's Redis transport keeps one list per priority step: the plain queue name holds
    # priority 0 (and messages without one), "<queue>\x06\x16<step>" the others. A global key
    # prefix, when configured, is added by the channel's client itself.
    return [queue if step == 0 else f"{queue}{channel.sep}{step}" for step in channel.priority_steps]


def queue_depths(queues: list[str]) -> QueueDepths:
    """Messages waiting in each queue, read from the broker. Never raises."""
    try:
        with _broker_connection() as conn:
            channel = conn.default_channel
            if conn.transport.driver_type != "redis":
                # AMQP brokers count for us (a passive declare fails for a queue never declared).
                return QueueDepths(reachable=True, waiting={
                    q: channel.queue_declare(queue=q, passive=True).message_count for q in queues})
            with channel.client.pipeline() as pipe:
                for queue in queues:
                    for name in _redis_list_names(channel, queue):
                        pipe.llen(name)
                pipe.hlen(channel.unacked_key)
                counts = pipe.execute()
    except Exception as exc:  # a monitoring read reports any broker failure, it never raises
        return QueueDepths(reachable=False, error=f"broker error: {type(exc).__name__}")
    steps = len(counts[:-1]) // max(len(queues), 1)
    waiting = {queue: sum(counts[i * steps:(i + 1) * steps]) for i, queue in enumerate(queues)}
    return QueueDepths(reachable=True, waiting=waiting, unacked=counts[-1])


def configured_queues() -> list[str]:
    return [queue.name for queue in celery_app.conf.task_queues]


_latest_lock = threading.Lock()
_latest: Inspection | None = None


def recent_inspection(max_age_s: float) -> Inspection:
    """The workers as last inspected in this process if that was asked less than `max_age_s`
    ago, else a fresh inspection: every live dashboard of a web process shares one broker round
    trip, however many are open. Blocks up to INSPECT_DEADLINE_S (a second when no worker
    answers): call it on a thread of its own, never on the one database calls share."""
    global _latest
    with _latest_lock:  # callers arriving during an inspection wait for it rather than start another
        if _latest is not None and time.time() - _latest.asked_at < max_age_s:
            return _latest
        asked_at = time.time()
        inspection = inspect_workers()
        inspection.asked_at = asked_at
        _latest = inspection
        return inspection
