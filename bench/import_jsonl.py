"""Import of a 1,000,000-line JSONL file (~200 bytes a line) into PostgreSQL.

Ours: `apps.datasets.importer.run_import(job_id)`, the function the Celery task calls, run in
a child process of its own so that its peak RSS is the worker's (the child reports its
`ru_maxrss`; the parent also polls it with psutil). The job is made the way the API makes it:
`services.import_create` stores the upload (a django File over the generated file) and
detects its format; then the job gets the mapping and options `import_start` would give it and
the state QUEUED, written directly, so that no Celery message is sent (`import_start` queues
the task on commit) and the child is the only thing that runs the import.

Floor, same run, same file: `pyarrow.json.read_json(file)` plus a `COPY` of the same rows
(ext_id, prompt, response, label, metadata as JSON, position, a 64-char hash) into a plain
table with the same columns and only a primary key. floor time = read time + COPY time, each
the mean of a run before ours and one after (the load of a shared machine drifts over the
minutes ours takes); ratio = our time / floor time (target <= 4), and peak RSS under 500 MB.
For reference only, the same COPY into a table made `LIKE datasets_datasetrow INCLUDING ALL`
(the row table's indexes, the full-text GIN index among them) is timed too: it shows what
the indexes alone cost any writer.

PostgreSQL and Redis as bench/stack.py sets them up (`live_stack`: the database
`bench_workbench`, fresh, dropped at the end with everything else). BENCH_IMPORT_ROWS changes the size
(for trying things out). BENCH_IMPORT_PROFILE=cprofile runs the child under cProfile, and
BENCH_IMPORT_PROFILE=py-spy under `py-spy record --idle` (waits on PostgreSQL included); both
print the child's top costs.
"""

import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.stack import PG_URL, django_already_set_up, live_stack, rerun_in_child, seed_dataset

ROWS = int(os.environ.get("BENCH_IMPORT_ROWS", "1000000"))
TARGET_RATIO = 4.0
TARGET_RSS_MB = 500
DATABASE = "bench_workbench"
COPY_COLUMNS = "version_id, position, row_hash, ext_id, prompt, response, label, metadata, split"
# The search benchmark (browse_scale) looks for this word; it is in 1 row of 100.
NEEDLE = "needle"
LABELS = ("positive", "negative", "neutral", "mixed")  # 25% each


# --- data ------------------------------------------------------------------------------------------

def _vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
    words.discard(NEEDLE)
    return sorted(words)


def records(count: int, seed: int = 7):
    """(id, prompt, response, label, source) for `count` rows; ~200 bytes each as JSONL.
    Every 100th row (from row 37) has NEEDLE in its prompt."""
    rng = random.Random(seed)
    words = _vocabulary(rng)
    choices = rng.choices
    for i in range(count):
        prompt = choices(words, k=7)
        if i % 100 == 37:
            prompt[4] = NEEDLE
        yield (f"row-{i:07}", " ".join(prompt).capitalize() + "?", " ".join(choices(words, k=8)).capitalize() + ".",
               LABELS[i % 4], f"source-{i % 50:02}")


def write_jsonl(path: Path, count: int) -> int:
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode
    with open(path, "w", encoding="utf-8") as handle:
        for ext_id, prompt, response, label, source in records(count):
            handle.write(dumps({"id": ext_id, "prompt": prompt, "response": response, "label": label,
                                "source": source}) + "\n")
    return path.stat().st_size


# --- floor -----------------------------------------------------------------------------------------

def _copy(table: str, rows: list[tuple]) -> float:
    import psycopg
    from django.conf import settings

    with psycopg.connect(f"{PG_URL}/{settings.DATABASES['default']['NAME']}") as conn:
        started = time.perf_counter()
        with conn.cursor() as cursor, cursor.copy(f"COPY {table} ({COPY_COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.commit()
        return time.perf_counter() - started


def measure_floor(path: Path, version_id: int, indexed: bool) -> dict:
    import pyarrow.json
    from django.db import connection

    started = time.perf_counter()
    table = pyarrow.json.read_json(path)
    read_s = time.perf_counter() - started
    assert table.num_rows == ROWS, table.num_rows
    columns = {name: table.column(name).to_pylist() for name in ("id", "prompt", "response", "label", "source")}
    del table
    # The same values our import stores: metadata as JSON, a position, a 64-character hash.
    rows = [(version_id, position, hashlib.sha256(prompt.encode()).hexdigest(), ext_id, prompt, response, label,
             f'{{"source": "{source}"}}', "")
            for position, (ext_id, prompt, response, label, source)
            in enumerate(zip(*columns.values(), strict=True))]
    del columns
    with connection.cursor() as cursor:
        cursor.execute("""CREATE TABLE bench_floor_rows (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, version_id bigint NOT NULL,
            position integer NOT NULL, row_hash varchar(64) NOT NULL, ext_id varchar(200), prompt text,
            response text, messages jsonb, label varchar(200), reference text, metadata jsonb NOT NULL,
            split varchar(16) NOT NULL)""")
        cursor.execute("CREATE TABLE bench_indexed_rows (LIKE datasets_datasetrow INCLUDING ALL)")
    connection.close()
    copy_s = _copy("bench_floor_rows", rows)
    indexed_copy_s = _copy("bench_indexed_rows", rows) if indexed else None
    del rows
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_floor_rows")
        cursor.execute("DROP TABLE bench_indexed_rows")
    connection.close()
    return {"read_s": read_s, "copy_s": copy_s, "indexed_copy_s": indexed_copy_s}


# --- ours ------------------------------------------------------------------------------------------

def queued_import(owner, dataset, path: Path):
    """An import job as `import_create` + `import_start` leave it, without queueing a task."""
    from django.core.files import File

    from apps.datasets.models import ImportJob
    from apps.datasets.services import import_create

    with open(path, "rb") as handle:
        job = import_create(user=owner, dataset=dataset, upload=File(handle, name=path.name))
    ImportJob.objects.filter(pk=job.pk).update(
        mapping={"id": "id", "prompt": "prompt", "response": "response", "label": "label"},
        options={"skip_bad_rows": False, "delimiter": None, "has_header": None},
        message="bench", state=ImportJob.State.QUEUED)
    return job


def run_child_import(stack, job_id: int, out: Path) -> dict:
    """Run the import in a child process of the stack; its time, its own peak RSS, and a polled peak."""
    import psutil

    argv = [sys.executable, "-m", "bench.import_jsonl", "--child", str(job_id), str(out)]
    profile = os.environ.get("BENCH_IMPORT_PROFILE", "")
    stacks = out.with_suffix(".stacks")
    if profile == "cprofile":
        argv.append("--profile")
    elif profile == "py-spy":
        argv = [str(Path(sys.executable).with_name("py-spy")), "record", "--idle", "--rate", "200", "--format", "raw",
                "--output", str(stacks), "--", *argv]
    # Without a connection pool, as this benchmark has always run the import.
    process = stack.spawn(argv, env={**stack.env, "DB_POOL": "0"})
    watched = psutil.Process(process.pid)
    polled = 0
    done = threading.Event()

    def poll():
        nonlocal polled
        while not done.is_set():
            try:
                # The import and the processes it reads parts of the file in, together.
                polled = max(polled, sum(process.memory_info().rss
                                         for process in [watched, *watched.children(recursive=True)]))
            except psutil.Error:
                pass
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    code = process.wait()
    done.set()
    poller.join()
    if code:
        raise RuntimeError(f"the import child exited with {code}")
    report = json.loads(out.read_text())
    report["polled_rss_mb"] = polled / 1024 / 1024
    if profile == "py-spy":
        kept = Path(tempfile.gettempdir()) / "bench-import_jsonl.stacks"
        shutil.copyfile(stacks, kept)
        print(f"import_jsonl: py-spy's collapsed stacks are in {kept}")
        print_stacks(stacks)
    return report


def print_stacks(path: Path, top: int = 30) -> None:
    """Summarise py-spy's collapsed stacks: share of samples per function, own and inclusive."""
    own, inclusive, total = {}, {}, 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame.split(" (")[0] + " " + frame.split(" (")[-1].rsplit(":", 1)[0].rsplit("/", 1)[-1]
                  for frame in stack.split(";")]
        total += int(count)
        own[frames[-1]] = own.get(frames[-1], 0) + int(count)
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + int(count)
    for title, table in (("own", own), ("inclusive", inclusive)):
        print(f"py-spy, {total} samples, top {top} by {title} share:")
        for frame, count in sorted(table.items(), key=lambda item: -item[1])[:top]:
            print(f"  {100 * count / total:5.1f}%  {frame}")


def child(job_id: int, out: str, profile: bool) -> None:
    import resource

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")
    django.setup()
    from apps.datasets.importer import run_import

    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.runcall(run_import, job_id)
        seconds = time.perf_counter() - started
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    else:
        started = time.perf_counter()
        run_import(job_id)
        seconds = time.perf_counter() - started
    # VmHWM: the peak resident set of this process's own address space. ru_maxrss would also
    # count the parent's resident set at fork time (Linux carries it across exec).
    peak_kib = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmHWM:"))
    Path(out).write_text(json.dumps({"seconds": seconds, "peak_rss_mb": peak_kib / 1024,
                                     "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


# --- the benchmark ---------------------------------------------------------------------------------

def run() -> list[dict]:
    names = ["import_jsonl_time", "import_jsonl_peak_rss"]
    if django_already_set_up():
        return rerun_in_child("bench.import_jsonl", names)
    with live_stack(DATABASE, prefix="bench-import-", pool=False) as stack:
        data_dir = stack.data_dir
        from django.db import connection

        from apps.datasets.models import DatasetRow, DatasetVersion, ImportJob
        from bench.report import publish, result

        path = Path(data_dir) / "rows.jsonl"
        started = time.perf_counter()
        size = write_jsonl(path, ROWS)
        print(f"import_jsonl: wrote {ROWS:,} lines, {size / 1e6:.0f} MB ({size / ROWS:.0f} bytes a line) "
              f"in {time.perf_counter() - started:.1f} s", flush=True)
        owner, _, dataset = seed_dataset()
        # The floor's rows carry a real version id, as ours do (the plain table has no foreign key).
        scratch = DatasetVersion.objects.create(dataset=dataset, number=1000, author=owner)
        loads = [os.getloadavg()[0]]

        # The floor is measured before and after ours and averaged: on a shared machine the
        # load changes over the minutes ours takes, and a single COPY is very sensitive to it.
        floors = [measure_floor(path, scratch.pk, indexed=False)]
        print(f"import_jsonl: floor before: read_json {floors[0]['read_s']:.2f} s, "
              f"COPY {floors[0]['copy_s']:.2f} s", flush=True)
        job = queued_import(owner, dataset, path)
        connection.close()
        loads.append(os.getloadavg()[0])
        ours = run_child_import(stack, job.pk, Path(data_dir) / "child.json")
        loads.append(os.getloadavg()[0])
        job.refresh_from_db()
        assert job.state == ImportJob.State.SUCCEEDED, (job.state, job.error[:2000])
        assert job.version.row_count == ROWS and DatasetRow.objects.filter(version=job.version).count() == ROWS
        print(f"import_jsonl: ours {ours['seconds']:.1f} s, peak RSS {ours['peak_rss_mb']:.0f} MB "
              f"(with its part processes, polled: {ours['polled_rss_mb']:.0f} MB)", flush=True)
        # The version is usable (browse, filters, training) from here; full-text search is indexed
        # after it by a worker task (apps.datasets.search_index), timed here on its own.
        from apps.datasets import search_index

        started = time.perf_counter()
        assert search_index.build(job.version_id)
        search_index_s = time.perf_counter() - started
        print(f"import_jsonl: then the search index, built in {search_index_s:.1f} s", flush=True)
        floors.append(measure_floor(path, scratch.pk, indexed=True))
        loads.append(os.getloadavg()[0])
        scratch.delete()
        print(f"import_jsonl: floor after: read_json {floors[1]['read_s']:.2f} s, COPY {floors[1]['copy_s']:.2f} s, "
              f"COPY with the row table's indexes {floors[1]['indexed_copy_s']:.2f} s", flush=True)
        connection.close()

    read_s = sum(f["read_s"] for f in floors) / len(floors)
    copy_s = sum(f["copy_s"] for f in floors) / len(floors)
    indexed_copy_s = floors[-1]["indexed_copy_s"]
    floor_s = read_s + copy_s
    ours_s = ours["seconds"]
    ratio = ours_s / floor_s
    shared = {"rows": ROWS, "file_bytes": size, "ours_s": round(ours_s, 2), "floor_s": round(floor_s, 2),
              "floor_read_json_s": round(read_s, 3), "floor_copy_s": round(copy_s, 3),
              "floor_runs": [{k: round(v, 3) for k, v in f.items() if v is not None} for f in floors],
              "read_json_rows_per_s": round(ROWS / read_s), "copy_rows_per_s": round(ROWS / copy_s),
              "copy_with_row_indexes_s": round(indexed_copy_s, 3),
              "search_index_build_s": round(search_index_s, 2),
              "searchable_after_s": round(ours_s + search_index_s, 2),
              "copy_with_row_indexes_rows_per_s": round(ROWS / indexed_copy_s),
              "loadavg_1m": [round(load, 2) for load in loads],
              "how": "run_import(job_id) in a child process; job made by services.import_create, then set QUEUED "
                     "with import_start's mapping and options (no Celery message); floor = mean of a run before "
                     "and one after ours"}
    peak_mb = max(ours["peak_rss_mb"], ours["polled_rss_mb"])
    return publish([
        result(name="import_jsonl_time", metric=f"rows/s importing a {ROWS:,}-line JSONL into PostgreSQL",
               unit="rows/s", value=ROWS / ours_s,
               baseline_what="pyarrow.json.read_json + COPY into a plain table (floor), rows/s",
               baseline_value=ROWS / floor_s, ratio=ratio, target=f"time ratio <= {TARGET_RATIO:g}",
               passed=ratio <= TARGET_RATIO, extra=shared),
        result(name="import_jsonl_peak_rss",
               metric="peak RSS of the import: its process, or it and its part processes together (polled)",
               unit="MB", value=peak_mb, baseline_what="target", baseline_value=TARGET_RSS_MB,
               target=f"< {TARGET_RSS_MB} MB", passed=peak_mb < TARGET_RSS_MB,
               extra={"polled_rss_mb": round(ours["polled_rss_mb"], 1),
                      "ru_maxrss_mb": round(ours["ru_maxrss_mb"], 1), "rows": ROWS}),
    ])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]), sys.argv[3], "--profile" in sys.argv)
    else:
        run()
