"""Each Celery worker reports its own CPU, memory and GPU use into Redis; the monitoring page
reads the reports. Celery's inspect replies carry no such figures, and a key with a TTL
vanishes by itself when its worker dies, so nobody reads a dead worker's numbers as current.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import psutil
import redis
from celery.signals import worker_ready, worker_shutdown

from apps.monitoring import engine_metrics, redis_store
from apps.monitoring.gpu import gpu_sample

logger = logging.getLogger(__name__)

REPORT_INTERVAL_S = 10.0
REPORT_TTL_S = 30  # three intervals: two missed reports and the figures are gone rather than stale
FIRST_REPORT_AFTER_S = 1.0  # psutil measures CPU use between two readings; the first one primes it
REPORT_KEY = redis_store.KEY_PREFIX + "worker:"


class ResourceSampler:
    """CPU and memory of one worker (its main process and every child: the pool processes that
    run the tasks) and of the host it runs on."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self._processes: dict[int, psutil.Process] = {}
        self.sample()  # primes the per-process and host CPU counters

    def _tree(self) -> list[psutil.Process]:
        # The same Process objects from one sample to the next: cpu_percent() measures since the
        # previous call on that object (a child seen for the first time counts 0 once).
        current = [self.root, *self.root.children(recursive=True)]
        self._processes = {p.pid: self._processes.get(p.pid, p) for p in current}
        return list(self._processes.values())

    def sample(self) -> dict:
        cpu_percent, rss_bytes = 0.0, 0
        for process in self._tree():
            try:
                with process.oneshot():
                    cpu_percent += process.cpu_percent(None)
                    rss_bytes += process.memory_info().rss
            except psutil.Error:  # ended between listing and reading
                continue
        memory = psutil.virtual_memory()
        return {"cpu_percent": round(cpu_percent, 1),  # 100 = one core busy
                "rss_bytes": rss_bytes, "processes": len(self._processes),
                "host_cpu_percent": psutil.cpu_percent(None), "cpu_count": psutil.cpu_count(),
                "host_memory_used_bytes": memory.total - memory.available,
                "host_memory_total_bytes": memory.total}


class Reporter:
    """A daemon thread in the worker's main process that publishes a report every interval."""

    def __init__(self, hostname: str, pid: int, interval_s: float = REPORT_INTERVAL_S) -> None:
        self.hostname, self.pid, self.interval_s = hostname, pid, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitoring-report", daemon=True)

    @property
    def key(self) -> str:
        return REPORT_KEY + self.hostname

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            redis_store.client().delete(self.key)  # a clean shutdown is gone at once, not after the TTL
        except redis.RedisError:
            pass
        engine_metrics.forget(self.hostname)

    def report(self, sampler: ResourceSampler) -> dict:
        return {"hostname": self.hostname, "pid": self.pid, "at": time.time(), **sampler.sample(),
                "gpus": gpu_sample()}

    def _run(self) -> None:
        sampler = ResourceSampler(self.pid)
        wait_s = FIRST_REPORT_AFTER_S
        while not self._stop.wait(wait_s):
            wait_s = self.interval_s
            try:
                redis_store.client().set(self.key, json.dumps(self.report(sampler)), ex=REPORT_TTL_S)
            except (redis.RedisError, psutil.Error) as exc:  # the worker goes on; its figures just go missing
                logger.warning("could not publish this worker's resource report: %s", exc)
            engine_metrics.publish(self.hostname)  # an inference worker's figures live as long as it does


def worker_reports() -> dict[str, dict]:
    """The latest report of every worker that published one within the TTL, by hostname.
    Raises redis.RedisError when Redis cannot be reached."""
    client = redis_store.client()
    keys = sorted(client.scan_iter(match=REPORT_KEY + "*", count=200))
    reports = {}
    for value in client.mget(keys) if keys else []:
        if value:  # expired between the scan and the read
            report = json.loads(value)
            reports[report["hostname"]] = report
    return reports


_reporter: Reporter | None = None


@worker_ready.connect
def _start_reporting(sender, **kwargs) -> None:
    global _reporter
    if _reporter is None:  # the consumer may announce itself again after a broker reconnect
        _reporter = Reporter(sender.hostname, os.getpid())
        _reporter.start()


@worker_shutdown.connect
def _stop_reporting(sender, **kwargs) -> None:
    global _reporter
    if _reporter is not None:
        _reporter.stop()
        _reporter = None
