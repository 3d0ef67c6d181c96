"""Worker-emit to browser-receive latency of live metric points, 50 viewers of one job vs 1.

Ours: the production web server (`python -m uvicorn workbench.asgi:application`, one process,
the command `manage.py up` runs) on PostgreSQL with the Redis channel layer (Redis db 5); 50
websocket clients (the `websockets` package, in this process, one asyncio loop), each a different
viewer of the project logged in with a session cookie (made by Django's test Client) and the
Origin header the server checks, connected to `ws/jobs/<id>/` of one job (JobConsumer: state,
backlog, "live", then every point). A publisher in a separate process (Django set up the way the
worker has it) emits train points with `apps.training.events.metric_point` — the call
`JobCallbacks.on_step` makes after its upsert — at RATE_HZ, each stamped with
`time.monotonic()` just before the call (CLOCK_MONOTONIC: one clock for every process of the
machine). Latency = the client's `time.monotonic()` when the message is parsed minus the stamp.

Reference, same run: the latency of a single viewer of another job on the same server (its socket
open all the time, as are the 50). Phases alternate between the two jobs (ABBA per round), so load
from other work on the machine falls on both. Target: p99 under 100 ms with 50 viewers (issue #7).

PostgreSQL at BENCH_PG_URL (postgresql://postgres@127.0.0.1:5432), Redis at BENCH_LIVE_REDIS_URL
(redis://127.0.0.1:6379/5); the database `bench_live_latency` is created fresh and dropped at the
end. About 1 minute.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

from bench.stack import django_already_set_up, live_stack, rerun_in_child, session_cookie

DATABASE = "bench_live_latency"
VIEWERS = 50
RATE_HZ = 20.0  # points a second: a fast training job's step rate
PHASE_POINTS = 100  # points per phase (5 s at 20 Hz)
ROUNDS = 3  # each round: 50 viewers, 1 viewer, 1 viewer, 50 viewers
WARMUP_POINTS = 20
TARGET_P99_MS = 100.0


# --- set-up ----------------------------------------------------------------------------------------

def _job(project, owner, name: str):
    from apps.datasets.models import Dataset, DatasetVersion
    from apps.registry.models import RegisteredModel
    from apps.training.models import TrainingJob

    dataset = Dataset.objects.create(project=project, name=f"Data {name}", created_by=owner)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status="ready", author=owner, row_count=0,
                                            content_hash="c" * 64)
    model = RegisteredModel.objects.create(project=project, name=f"Base {name}", format="hf_dir",
                                           source_path="/nonexistent", weights_path="/nonexistent", status="ready",
                                           info={})
    return TrainingJob.objects.create(project=project, name=name, base_model=model, dataset_version=version,
                                      config={"format": "prompt_response"}, state="running", created_by=owner,
                                      total_steps=100_000)


def _seed() -> dict:
    from django.contrib.auth import get_user_model

    from apps.projects.services import member_add, project_create

    User = get_user_model()
    owner = User.objects.create_user("bench-owner", password="x" * 12)
    project = project_create(user=owner, name="Bench live")
    cookies = []
    for n in range(VIEWERS + 1):
        user = User.objects.create_user(f"bench-viewer-{n:02}", password=None)
        member_add(actor=owner, project=project, username=user.username, role="viewer")
        cookies.append(session_cookie(user))
    return {"many": _job(project, owner, "Fifty viewers").pk, "one": _job(project, owner, "One viewer").pk,
            "cookies": cookies}


# --- the publisher (a child process, Django set up as in the worker) ---------------------------------

def publisher_main() -> None:
    """Reads "job_id count" lines; emits `count` points to that job at RATE_HZ, answers "done"."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")
    django.setup()
    from apps.training import events

    step = 0
    print("ready", flush=True)
    for line in sys.stdin:
        job_id, count = (int(x) for x in line.split())
        calls_ms = []
        next_at = time.monotonic()
        for _ in range(count):
            next_at += 1 / RATE_HZ
            step += 1
            point = {"step": step, "epoch": step / 1000, "loss": 2.0 / step ** 0.1, "lr": 2e-4, "grad_norm": 1.0,
                     "tokens_per_s": 1000.0, "tokens_seen": 512 * step, "memory_mb": 900.0, "elapsed_s": step / 20}
            point["sent_at"] = time.monotonic()
            events.metric_point(job_id, "train", point)
            calls_ms.append(round((time.monotonic() - point["sent_at"]) * 1000, 3))
            time.sleep(max(next_at - time.monotonic(), 0))
        print("done " + json.dumps(calls_ms), flush=True)


# --- the viewers ---------------------------------------------------------------------------------

class Viewer:
    def __init__(self, address: str, job_id: int, cookie: str):
        self.url = f"ws://{address}/ws/jobs/{job_id}/"
        self.origin = f"http://{address}"  # the site's own, port included: the handshake compares it in full
        self.cookie = cookie
        self.samples: list[tuple[int, float]] = []  # (step, ms)
        self.socket = None

    async def connect(self) -> None:
        import websockets

        self.socket = await websockets.connect(self.url, origin=self.origin, additional_headers={"Cookie": self.cookie},
                                               max_queue=None)
        while True:  # state, backlog, then "live"
            if json.loads(await asyncio.wait_for(self.socket.recv(), 30))["type"] == "live":
                return

    async def listen(self) -> None:
        async for raw in self.socket:
            received = time.monotonic()
            message = json.loads(raw)
            if message["type"] == "points":
                for point in message["points"]:
                    if "sent_at" in point:
                        self.samples.append((point["step"], (received - point["sent_at"]) * 1000))


async def _measure(address: str, seeded: dict, publisher: subprocess.Popen) -> dict:
    many = [Viewer(address, seeded["many"], cookie) for cookie in seeded["cookies"][:VIEWERS]]
    one = Viewer(address, seeded["one"], seeded["cookies"][VIEWERS])
    started = time.perf_counter()
    await asyncio.gather(*(viewer.connect() for viewer in [*many, one]))
    connect_s = time.perf_counter() - started
    listeners = [asyncio.create_task(viewer.listen()) for viewer in [*many, one]]

    async def phase(job_id: int, count: int) -> tuple[int, int]:
        first = len(publisher_steps)
        publisher.stdin.write(f"{job_id} {count}\n")
        publisher.stdin.flush()
        line = await asyncio.get_running_loop().run_in_executor(None, publisher.stdout.readline)
        assert line.startswith("done "), line
        publish_ms.extend(json.loads(line[5:]))
        await asyncio.sleep(0.5)  # the last point's messages arrive
        publisher_steps.extend(range(first + 1, first + count + 1))
        return first + 1, first + count  # the steps of this phase

    publisher_steps: list[int] = []
    publish_ms: list[float] = []  # how long each metric_point call took in the publisher
    windows = {"many": [], "one": []}
    await phase(seeded["many"], WARMUP_POINTS)
    await phase(seeded["one"], WARMUP_POINTS)
    load = []
    for round_ in range(ROUNDS):
        order = ["many", "one", "one", "many"] if round_ % 2 == 0 else ["one", "many", "many", "one"]
        for side in order:
            load.append(os.getloadavg()[0])
            windows[side].append(await phase(seeded[side], PHASE_POINTS // 2))
        print(f"  round {round_ + 1}: {sum(len(v.samples) for v in many):,} samples with {VIEWERS} viewers, "
              f"{len(one.samples)} with one", flush=True)
    for task in listeners:
        task.cancel()
    await asyncio.gather(*(viewer.socket.close() for viewer in [*many, one]), return_exceptions=True)

    def samples(viewers: list[Viewer], side: str) -> tuple[list[float], int]:
        steps = {s for low, high in windows[side] for s in range(low, high + 1)}
        got = [ms for viewer in viewers for step, ms in viewer.samples if step in steps]
        return got, len(steps) * len(viewers)

    many_ms, many_expected = samples(many, "many")
    by_step: dict[int, list[float]] = {}  # the 50 viewers' latencies of each point of the 50-viewer phases
    steps = {s for low, high in windows["many"] for s in range(low, high + 1)}
    for viewer in many:
        for step, ms in viewer.samples:
            if step in steps:
                by_step.setdefault(step, []).append(ms)
    one_ms, one_expected = samples([one], "one")
    return {"many_ms": many_ms, "many_expected": many_expected, "one_ms": one_ms, "one_expected": one_expected,
            "connect_s": connect_s, "load": load, "publish_ms": publish_ms,
            "first_viewer_ms": [min(v) for v in by_step.values()],
            "spread_ms": [max(v) - min(v) for v in by_step.values()]}


def run() -> list[dict]:
    names = ["live_latency_p99", "live_latency_p50"]
    if django_already_set_up():
        return rerun_in_child("bench.live_latency", names)
    with live_stack(DATABASE, prefix="bench-live-") as stack:
        from django.db import connection

        from bench.report import percentile, publish, result

        seeded = _seed()
        connection.close()
        address = stack.start_web()
        publisher = stack.spawn([sys.executable, "-m", "bench.live_latency", "--publisher"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert publisher.stdout.readline().strip() == "ready"
        measured = asyncio.run(_measure(address, seeded, publisher))

    many, one = measured["many_ms"], measured["one_ms"]
    complete = len(many) == measured["many_expected"] and len(one) == measured["one_expected"]
    stats = {f"{side}_p{q}_ms": round(percentile(samples, q), 2) for side, samples in (("many", many), ("one", one))
             for q in (50, 90, 99)}
    stats.update(many_max_ms=round(max(many), 2), one_max_ms=round(max(one), 2),
                 publish_call_p50_ms=round(percentile(measured["publish_ms"], 50), 2),
                 publish_call_p99_ms=round(percentile(measured["publish_ms"], 99), 2),
                 first_viewer_p50_ms=round(percentile(measured["first_viewer_ms"], 50), 2),
                 fanout_spread_p50_ms=round(percentile(measured["spread_ms"], 50), 2),
                 fanout_spread_p99_ms=round(percentile(measured["spread_ms"], 99), 2))
    print(f"live_latency: {VIEWERS} viewers of one job, {RATE_HZ:g} points/s, {len(many):,} deliveries "
          f"(expected {measured['many_expected']:,}); 1 viewer: {len(one):,} (expected {measured['one_expected']:,}); "
          f"{VIEWERS + 1} sockets connected in {measured['connect_s']:.1f} s")
    print(f"  {'side':<22} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for side, label in (("many", f"{VIEWERS} viewers"), ("one", "1 viewer")):
        print(f"  {label:<22} {stats[side + '_p50_ms']:>8.2f} {stats[side + '_p90_ms']:>8.2f} "
              f"{stats[side + '_p99_ms']:>8.2f} {stats[side + '_max_ms']:>8.2f}")
    print(f"  the publisher's metric_point call itself (included above): p50 {stats['publish_call_p50_ms']:.2f} ms, "
          f"p99 {stats['publish_call_p99_ms']:.2f} ms")
    print(f"  per point with {VIEWERS} viewers: the first viewer's latency p50 {stats['first_viewer_p50_ms']:.2f} ms; "
          f"last minus first viewer p50 {stats['fanout_spread_p50_ms']:.2f} ms, p99 {stats['fanout_spread_p99_ms']:.2f} ms")
    extra = {"viewers": VIEWERS, "rate_hz": RATE_HZ, "points_per_side": PHASE_POINTS * ROUNDS,
             "deliveries": len(many), "expected_deliveries": measured["many_expected"],
             "one_viewer_deliveries": len(one), "one_viewer_expected": measured["one_expected"],
             "all_delivered": complete, "connect_s": round(measured["connect_s"], 2),
             "load_average_1m": [round(x, 2) for x in measured["load"]], **stats,
             "server": "uvicorn workbench.asgi:application (one process), PostgreSQL, Redis channel layer",
             "clock": "time.monotonic() in the publisher and the client process (CLOCK_MONOTONIC)"}
    p99, p50 = percentile(many, 99), percentile(many, 50)
    return publish([
        result(name="live_latency_p99", metric=f"p99 worker-emit to client-receive latency, {VIEWERS} viewers of one "
                                               "job (ws/jobs/<id>/), loopback", unit="ms", value=p99,
               baseline_what="same, 1 viewer of another job (same server, phases alternate)",
               baseline_value=percentile(one, 99), target=f"< {TARGET_P99_MS:g} ms",
               passed=p99 < TARGET_P99_MS and complete, extra=extra),
        result(name="live_latency_p50", metric=f"p50 worker-emit to client-receive latency, {VIEWERS} viewers",
               unit="ms", value=p50, baseline_what="same, 1 viewer", baseline_value=percentile(one, 50),
               target="reported", passed=complete, extra=extra),
    ])


if __name__ == "__main__":
    if sys.argv[1:] == ["--publisher"]:
        publisher_main()
    else:
        run()
