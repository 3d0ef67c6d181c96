"""Scale-out of the general workers (issue #22): N worker processes (1, 2, 4) against one broker
importing the same set of small files, and the queue-depth signal the autoscaler reads.

Each round starts N Celery worker processes on the `default` queue as a cluster runs them (one
process per pod, `--concurrency 1`; BENCH_SCALE_CONCURRENCY changes it), then queues FILES imports
of ROWS-row JSON Lines files at once through the services a person's upload goes through
(`import_create`, `import_start`: each file into a dataset of its own), and waits until every
import has ended and the queue is empty (search indexing, queued by each import, included).
Throughput: imports ended per second, from the first queued to the queue drained; the baseline is
N = 1 in the same run, so the ratio is the speed-up. While it runs, the depth of the `default`
queue is sampled every SAMPLE_S the way the KEDA ScaledObject reads it (deploy/k8s/autoscaling.yaml:
the Redis list lengths of the queue and its priority steps, apps.monitoring.broker.queue_depths):
it must rise with the load and fall to 0. On a 2-core machine the speed-up is bounded by the cores
(and PostgreSQL, Redis and this process share them): 4 workers show what oversubscription costs.

PostgreSQL at BENCH_PG_URL, Redis at BENCH_REDIS_URL (db 2); a fresh database `bench_scale_workers`,
dropped at the end. About 3 minutes."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.import_jsonl import (
    PG_URL,
    REDIS_URL,
    ROOT,
    clear_redis,
    django_already_set_up,
    make_owner_dataset,
    rerun_in_child,
    setup_django,
    tear_down,
    write_jsonl,
)

DATABASE = "bench_scale_workers"
FILES = int(os.environ.get("BENCH_SCALE_FILES", "24"))
ROWS = int(os.environ.get("BENCH_SCALE_ROWS", "2000"))
WORKER_COUNTS = [int(n) for n in os.environ.get("BENCH_SCALE_WORKERS", "1,2,4").split(",")]
CONCURRENCY = int(os.environ.get("BENCH_SCALE_CONCURRENCY", "1"))
SAMPLE_S = 0.25
TIMEOUT_S = 600


def _start_workers(count: int, data_dir: str, round_: int) -> list[subprocess.Popen]:
    env = {**os.environ, "DATABASE_URL": f"{PG_URL}/{DATABASE}", "REDIS_URL": REDIS_URL,
           "WORKBENCH_DATA_DIR": data_dir}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    from workbench.celery import app

    workers, names = [], []
    for n in range(count):
        name = f"bench-scale-{round_}-{n}@bench"
        names.append(name)
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workbench", "--quiet", "worker", "-Q", "default",
             "--concurrency", str(CONCURRENCY), "--hostname", name, "--loglevel", "WARNING",
             "--without-mingle", "--without-gossip"], env=env, cwd=ROOT, stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + 90
    while len(app.control.ping(timeout=1, destination=names)) < count:
        if time.monotonic() > deadline or any(worker.poll() is not None for worker in workers):
            _stop_workers(workers)
            raise RuntimeError(f"{count} workers did not all start")
    return workers


def _stop_workers(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.terminate()
    for worker in workers:
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)


def _one_round(count: int, files: list[Path], owner, project, data_dir: str, round_: int) -> dict:
    from django.core.files import File

    from apps.datasets.models import ImportJob
    from apps.datasets.services import dataset_create, import_create, import_start
    from apps.monitoring.broker import queue_depths

    jobs = []
    for n, path in enumerate(files):  # drafts first: the round measures the queue, not the uploads
        dataset = dataset_create(user=owner, project=project, name=f"r{round_}-{n:03}")
        with open(path, "rb") as handle:
            jobs.append(import_create(user=owner, dataset=dataset, upload=File(handle, name=path.name)))
    workers = _start_workers(count, data_dir, round_)
    try:
        samples = []
        started = time.perf_counter()
        for job in jobs:
            import_start(user=owner, job=job, mapping={"id": "id", "prompt": "prompt", "response": "response",
                                                       "label": "label"})
        ids = [job.pk for job in jobs]
        while True:
            depth = queue_depths(["default"])
            samples.append((round(time.perf_counter() - started, 2), depth.waiting.get("default", -1)))
            ended = ImportJob.objects.filter(pk__in=ids, state__in=ImportJob.ENDED).count()
            if ended == len(ids) and depth.waiting.get("default") == 0 and not depth.unacked:
                break
            if time.perf_counter() - started > TIMEOUT_S:
                raise RuntimeError(f"{count} workers: {ended}/{len(ids)} imports ended after {TIMEOUT_S} s")
            time.sleep(SAMPLE_S)
        seconds = time.perf_counter() - started
    finally:
        _stop_workers(workers)
    states = dict.fromkeys(ImportJob.State.values, 0)
    for state in ImportJob.objects.filter(pk__in=ids).values_list("state", flat=True):
        states[state] += 1
    depths = [depth for _, depth in samples]
    peak_at = depths.index(max(depths))
    return {"workers": count, "seconds": round(seconds, 2), "imports_per_s": round(len(ids) / seconds, 3),
            "states": {k: v for k, v in states.items() if v}, "depth_max": max(depths), "depth_last": depths[-1],
            "depth_rose_then_fell": max(depths) > 0 and depths[-1] == 0 and all(
                later <= earlier + 1 for earlier, later in zip(depths[peak_at:], depths[peak_at + 1:], strict=False)),
            "depth_samples": samples}


def run() -> list[dict]:
    if django_already_set_up():
        return rerun_in_child("bench.scale_workers", [f"scale_workers_{n}" for n in WORKER_COUNTS])
    data_dir = tempfile.mkdtemp(prefix="bench-scale-")
    try:
        setup_django(DATABASE, data_dir)
        from bench.report import publish, result

        owner, project, _ = make_owner_dataset()
        files = []
        for n in range(FILES):
            path = Path(data_dir) / f"part-{n:03}.jsonl"
            write_jsonl(path, ROWS)  # the same rows in each: the work per import is equal
            files.append(path)
        rounds = [_one_round(count, files, owner, project, data_dir, round_)
                  for round_, count in enumerate(WORKER_COUNTS)]
    finally:
        tear_down(DATABASE, data_dir=data_dir, clear=lambda: clear_redis(REDIS_URL))
    base = rounds[0]["imports_per_s"]
    results = []
    for measured in rounds:
        n = measured["workers"]
        print(f"  {n} worker(s): {measured['imports_per_s']:.2f} imports/s in {measured['seconds']:.1f} s, "
              f"queue depth peak {measured['depth_max']}, last {measured['depth_last']}, states {measured['states']}",
              flush=True)
        clean = measured["states"].get("succeeded", 0) == FILES and measured["depth_rose_then_fell"]
        results.append(result(
            name=f"scale_workers_{n}", metric=f"imports ended per second, {FILES} files of {ROWS:,} rows, "
                                              f"{n} worker process(es) x concurrency {CONCURRENCY}",
            unit="imports/s", value=measured["imports_per_s"],
            baseline_what=f"same files, {WORKER_COUNTS[0]} worker process, same run", baseline_value=base,
            target="reported; depth rises then falls to 0", passed=clean,
            extra={**{k: v for k, v in measured.items() if k != "imports_per_s"}, "cores": os.cpu_count()}))
    publish(results)
    return results


if __name__ == "__main__":
    run()
