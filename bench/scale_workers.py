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

PostgreSQL and Redis as bench/stack.py sets them up (`live_stack`: a fresh database
`bench_scale_workers`, dropped at the end; the workers by its `start_workers`). About 3 minutes."""

import os
import time
from pathlib import Path

from bench.import_jsonl import write_jsonl
from bench.stack import django_already_set_up, live_stack, rerun_in_child, seed_dataset

DATABASE = "bench_scale_workers"
FILES = int(os.environ.get("BENCH_SCALE_FILES", "24"))
ROWS = int(os.environ.get("BENCH_SCALE_ROWS", "2000"))
WORKER_COUNTS = [int(n) for n in os.environ.get("BENCH_SCALE_WORKERS", "1,2,4").split(",")]
CONCURRENCY = int(os.environ.get("BENCH_SCALE_CONCURRENCY", "1"))
SAMPLE_S = 0.25
TIMEOUT_S = 600


def _one_round(stack, count: int, files: list[Path], owner, project, round_: int) -> dict:
    from django.core.files import File

    from apps.datasets.models import ImportJob
    from apps.datasets.services import dataset_create, import_create, import_start
    from apps.monitoring.broker import queue_depths

    jobs = []
    for n, path in enumerate(files):  # drafts first: the round measures the queue, not the uploads
        dataset = dataset_create(user=owner, project=project, name=f"r{round_}-{n:03}")
        with open(path, "rb") as handle:
            jobs.append(import_create(user=owner, dataset=dataset, upload=File(handle, name=path.name)))
    # Prefork, as a cluster runs them; without a connection pool, as this benchmark has always run them.
    workers = stack.start_workers(count, name=f"bench-scale-{round_}", queue="default", pool="prefork",
                                  concurrency=CONCURRENCY, env={"DB_POOL": "0"})
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
        stack.stop(workers)
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
    with live_stack(DATABASE, prefix="bench-scale-", pool=False) as stack:
        from bench.report import publish, result

        owner, project, _ = seed_dataset()
        files = []
        for n in range(FILES):
            path = Path(stack.data_dir) / f"part-{n:03}.jsonl"
            write_jsonl(path, ROWS)  # the same rows in each: the work per import is equal
            files.append(path)
        rounds = [_one_round(stack, count, files, owner, project, round_)
                  for round_, count in enumerate(WORKER_COUNTS)]
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
