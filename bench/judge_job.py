"""Judging a comparison's cells through the job and the inference worker (issue #20's
`judge_throughput`, at the stack's level): cells/s of a judge run with the worker's continuous
batching vs the same run one request at a time, same cells, same run. (bench/judge_throughput.py
measures the engine alone, in process.)

The stack (bench.stack.live_stack): PostgreSQL (BENCH_PG_URL; database `bench_judge_job`, made fresh
and dropped at the end), Redis (BENCH_LIVE_REDIS_URL) as broker and channel layer, the production web
server (uvicorn, one process) and two `inference` Celery workers (threads pool, 16, as `manage.py up`
runs it), each loading the demo model (SmolLM2-135M-Instruct, fp32, CPU) in its own model cache.
Seeded (seed_demo): a user, their project, the demo model registered ready, a second ready model of
the same weights; a comparison of the two over CELLS / 2 chat prompts (bench.generate_batched's
questions, repeated), its CELLS outputs written directly in the database as a finished comparison
(tests/comparison/factories.make_comparison: no generation), a short answer for the first
model and a worse one for the second; a pointwise judge (one criterion, a 1-5 scale, the demo model
as the local judge, answers of at most MAX_TOKENS tokens) made with apps.evaluation.services.judge_create.

A run is launched as a user does: `POST /api/projects/<id>/judges/<judge>/runs/ {"comparison": id}`
to the web server with a project API token (compare.view, compare.run); the view's
services.judge_run_start queues the `evaluation.judge_run` task on `inference` when it commits, and a
worker runs apps.evaluation.runner.run_judge_job (claim, judge every output through the worker's
shared batcher, a transaction of verdicts per item, the summary). Timed: from just before the POST to
the run's `finished_at` (written by the worker; its row is polled until it has ended), so the
request, the queue, the claim, every verdict written and the summary are in it. cells/s = judged
cells (verdicts stored) / those seconds.

The baseline: the same run on the other worker, started with INFERENCE_MAX_BATCH_SIZE=1 in its
environment. That setting is read in the inference worker, where both the job and the engine run: by
apps.evaluation.runner.items_in_flight (a local judge asks max(1, INFERENCE_MAX_BATCH_SIZE // calls per
item) items at once; pointwise: one call an item), so run_judge takes its one-at-a-time path (each
call made and answered before the next), and by apps.serving.runner.batcher (the batch's row limit:
1). So the baseline is judging the cells one request at a time through the same job, worker, batcher
and model; nothing else differs. Ours runs with the deployed value (settings.INFERENCE_MAX_BATCH_SIZE,
32 by default): that many items in flight, decoded together. Both workers are up for the whole run
and warmed by a small judge run each (WARM_CELLS cells, untimed), and only the side being measured
consumes `inference` (Celery's add_consumer / cancel_consumer): the other sits idle, its model loaded.
Runs alternate baseline, ours, ours, baseline, ROUNDS times (BENCH_JUDGE_ROUNDS, default 1); medians.

Also reported: how many verdicts the judge's schema could read (a 135M model is a poor judge: the
bench measures speed), each run's queue wait (launch to `started_at`). Target: ratio >= 4. With the
issue's 256 cells the baseline takes several minutes on 2 cores; BENCH_JUDGE_CELLS (even) sets fewer.
"""

from __future__ import annotations

import os
import statistics
import time

from bench.stack import django_already_set_up, rerun_in_child

DATABASE = "bench_judge_job"
CELLS = int(os.environ.get("BENCH_JUDGE_CELLS", "256"))
ROUNDS = int(os.environ.get("BENCH_JUDGE_ROUNDS", "1"))
MAX_TOKENS = 48  # as bench/judge_throughput.py
WARM_CELLS = 8
WORKER_THREADS = 16  # the inference worker of `manage.py up`
RUBRIC = {"kind": "pointwise", "criteria": [
    {"name": "helpful", "description": "answers the question correctly and briefly", "scale": "1-5"}]}
QUEUE = "inference"  # JudgeRun.QUEUE
BASELINE_QUEUE = "bench-judge-job-idle"  # where the baseline worker starts: nothing is ever sent there
RUN_TIMEOUT_S = 3600
SETTLE_S = 1.5  # kombu's Redis poll (BRPOP) times out after 1 s
ANSWERS = [  # a short answer to each of bench.generate_batched.QUESTIONS, in order
    "Paris.", "Red, yellow and blue.", "Eight.", "56.", "William Shakespeare.", "100 degrees Celsius at sea level.",
    "Glad.", "Plants turning light, water and carbon dioxide into sugar and oxygen.",
    "Rayleigh scattering of sunlight.", "Jupiter.", "Buenos días.", "Temperature.", "The bat.", "366.", "Au.",
    "Waves fold and fall / salt wind hums an old refrain / the tide keeps its time.", "Hot.", "The Pacific.",
    "Portuguese.", "They gather nectar and evaporate its water in the hive.", "9.", "Whiskers.", "Mount Everest.",
    "Light, water, air and nutrients.", "A word that names a person, place or thing.", "Leonardo da Vinci.",
    "32 degrees Fahrenheit.", "Solar and wind.", "Avocado.", "Seven.",
    "A number greater than 1 whose only divisors are 1 and itself.", "Keep a regular bedtime.",
]
WORSE = "I am not sure, but it might be something else entirely."


def _comparison(user, project, models, prompts: int, name: str):
    """A finished comparison of `models` over `prompts` chat prompts, every output written here:
    a short answer for the first model, a worse one for the second."""
    from bench.generate_batched import QUESTIONS
    from tests.comparison.factories import make_comparison

    return make_comparison(project, user, models=models, name=name,
                           prompts=[QUESTIONS[i % len(QUESTIONS)] for i in range(prompts)],
                           answer=lambda prompt, contestant: (ANSWERS[prompt.position % len(ANSWERS)]
                                                              if contestant.position == 0 else WORSE))


def _seed(model_dir) -> dict:
    from datetime import timedelta

    from django.utils import timezone

    from apps.accounts.services import token_create
    from apps.evaluation.services import judge_create
    from apps.registry.models import RegisteredModel
    from bench.stack import seed_demo

    demo = seed_demo(model_dir, project="Bench judge job", model="SmolLM2-135M-Instruct", username="bench-scientist",
                     token=None)
    other = RegisteredModel.objects.create(project=demo.project, name="SmolLM2-135M-Instruct copy", format="hf_dir",
                                           source_path=str(model_dir), weights_path=str(model_dir), status="ready",
                                           info=demo.model.info)
    _, key = token_create(user=demo.user, name="judge", project=demo.project,
                          permissions=["project.view", "model.view", "compare.view", "compare.run"],
                          expires_at=timezone.now() + timedelta(days=1))
    judge = judge_create(user=demo.user, project=demo.project, name="Demo judge", rubric=RUBRIC,
                         local_model=demo.model.pk, max_tokens=MAX_TOKENS)
    models = [demo.model, other]
    return {"project": demo.project, "judge": judge, "key": key,
            "comparison": _comparison(demo.user, demo.project, models, CELLS // 2, f"{CELLS} cells"),
            "warm": _comparison(demo.user, demo.project, models, WARM_CELLS // 2, "Warm-up")}


def _consume(active: str, idle: str) -> None:
    """Only the worker `active` consumes the judge runs' queue; checked with the workers' own answer.
    The idle worker's poll of Redis already waiting when it stops consuming may still take the next
    message (and put it back: kombu's "Requeuing undeliverable message"): the poll ends within its
    1 s timeout, so the switch waits SETTLE_S before anything is launched (untimed)."""
    from workbench.celery import app

    app.control.cancel_consumer(QUEUE, destination=[idle], reply=True, timeout=5)
    app.control.add_consumer(QUEUE, destination=[active], reply=True, timeout=5)
    queues = app.control.inspect(destination=[active, idle], timeout=5).active_queues() or {}
    serving = {host for host, listed in queues.items() if any(q["name"] == QUEUE for q in listed)}
    if serving != {active}:
        raise RuntimeError(f"{QUEUE} consumed by {sorted(serving)}, wanted only {active}")
    time.sleep(SETTLE_S)


def _judge(stack, seeded: dict, comparison, worker: str) -> dict:
    """Launch a run of the judge over `comparison` through the API; wait for it to end (on `worker`,
    checked); its figures."""
    import requests

    from apps.evaluation.models import JudgeRun, Verdict

    project, judge = seeded["project"], seeded["judge"]
    launched = time.time()
    response = requests.post(f"{stack.url}/api/projects/{project.pk}/judges/{judge.pk}/runs/",
                             json={"comparison": comparison.pk}, timeout=60,
                             headers={"Authorization": f"Bearer {seeded['key']}"})
    if response.status_code != 201:
        raise RuntimeError(f"launching the judge run: {response.status_code} {response.text[:500]}")
    run_id = response.json()["id"]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while (run := JudgeRun.objects.get(pk=run_id)).state not in JudgeRun.ENDED:
        if time.monotonic() > deadline:
            raise RuntimeError(f"judge run {run_id} did not end within {RUN_TIMEOUT_S} s")
        time.sleep(0.2)
    if run.state != JudgeRun.State.SUCCEEDED:
        raise RuntimeError(f"judge run {run_id} {run.state}: {run.error}")
    if run.worker != worker or run.runs != 1:
        raise RuntimeError(f"judge run {run_id} ran on {run.worker} ({run.runs} claims), not only on {worker}")
    verdicts = Verdict.objects.filter(run_id=run_id)
    cells = verdicts.count()
    seconds = run.finished_at.timestamp() - launched
    return {"run": run_id, "cells": cells, "seconds": seconds, "cells_per_s": cells / seconds,
            "queued_s": run.started_at.timestamp() - launched, "calls_done": run.calls_done,
            "parsed": verdicts.filter(answer__isnull=False).count(),
            "completion_tokens": sum(verdicts.values_list("completion_tokens", flat=True)),
            "load_1m": os.getloadavg()[0]}


def run() -> list[dict]:
    names = ["judge_job"]
    if django_already_set_up():
        return rerun_in_child("bench.judge_job", names)
    if CELLS < 2 or CELLS % 2:
        raise SystemExit(f"BENCH_JUDGE_CELLS is an even number of cells (2 models x prompts), not {CELLS}")
    from bench.stack import live_stack

    with live_stack(DATABASE, prefix="bench-judge-job-") as stack:
        from django.conf import settings
        from django.db import connection

        from bench.generate_batched import demo_model_dir
        from bench.report import publish, result

        model_dir = demo_model_dir()
        batch = settings.INFERENCE_MAX_BATCH_SIZE
        seeded = _seed(model_dir)
        connection.close()
        stack.start_web()
        stack.start_workers(1, name="bench-judge-ours", concurrency=WORKER_THREADS,
                            env={"INFERENCE_MAX_BATCH_SIZE": str(batch)})
        stack.start_workers(1, name="bench-judge-one", queue=BASELINE_QUEUE, concurrency=WORKER_THREADS,
                            env={"INFERENCE_MAX_BATCH_SIZE": "1"})
        hosts = {"ours": stack.worker_hostname("bench-judge-ours"), "one": stack.worker_hostname("bench-judge-one")}
        other = {"ours": "one", "one": "ours"}
        for side in ("ours", "one"):  # each worker loads the model and judges once, untimed
            _consume(hosts[side], hosts[other[side]])
            warm = _judge(stack, seeded, seeded["warm"], hosts[side])
            print(f"  warm-up ({side}): {warm['cells']} cells, {warm['seconds']:.1f} s", flush=True)
        runs: dict[str, list[dict]] = {"ours": [], "one": []}
        for _ in range(ROUNDS):
            for side in ("one", "ours", "ours", "one"):
                _consume(hosts[side], hosts[other[side]])
                runs[side].append(_judge(stack, seeded, seeded["comparison"], hosts[side]))
                r = runs[side][-1]
                print(f"  {side}: {r['cells']} cells, {r['seconds']:.1f} s ({r['cells_per_s']:.2f} cells/s), "
                      f"{r['parsed']} verdicts parsed, queued {r['queued_s']:.2f} s", flush=True)
        connection.close()

    ours_s = statistics.median(r["seconds"] for r in runs["ours"])
    one_s = statistics.median(r["seconds"] for r in runs["one"])
    ours = statistics.median(r["cells_per_s"] for r in runs["ours"])
    one = statistics.median(r["cells_per_s"] for r in runs["one"])
    ratio = ours / one
    judged = [r["cells"] for side in runs.values() for r in side]
    print(f"judge_job: {CELLS} comparison cells judged by the demo model (pointwise, one 1-5 criterion, <= "
          f"{MAX_TOKENS} tokens an answer) through POST .../judges/<id>/runs/ -> evaluation.judge_run on an "
          f"inference worker (threads, {WORKER_THREADS}); {ROUNDS} round(s) ABBA, medians")
    print(f"  {'side':<52} {'cells':>6} {'seconds':>8} {'cells/s':>8} {'ratio':>6} {'tokens':>7} "
          f"{'verdicts parsed':>16}")
    for side, label, seconds, rate in (
            ("one", "one request at a time (INFERENCE_MAX_BATCH_SIZE=1)", one_s, one),
            ("ours", f"continuous batching (INFERENCE_MAX_BATCH_SIZE={batch})", ours_s, ours)):
        parsed = f"{sum(r['parsed'] for r in runs[side])}/{sum(r['cells'] for r in runs[side])}"
        print(f"  {label:<52} {runs[side][0]['cells']:>6} {seconds:>8.2f} {rate:>8.2f} {rate / one:>6.2f} "
              f"{runs[side][-1]['completion_tokens']:>7} {parsed:>16}")
    print("  (seconds and cells/s: medians over the side's runs; tokens: the judge's answer tokens in its last run; "
          "verdicts parsed: over all its runs)")
    extra = {"cells": CELLS, "rounds": ROUNDS, "max_tokens": MAX_TOKENS, "inference_max_batch_size": batch,
             "seconds": {"ours": round(ours_s, 3), "one_at_a_time": round(one_s, 3)},
             "runs": {"ours": runs["ours"], "one_at_a_time": runs["one"]}, "worker_threads": WORKER_THREADS,
             "model": "SmolLM2-135M-Instruct fp32 (from Q4_1 GGUF), CPU",
             "stack": f"uvicorn (1 process) + 2 celery inference workers (threads, {WORKER_THREADS}), one consuming "
                      "at a time; PostgreSQL, Redis"}
    return publish([result(
        name="judge_job", metric=f"comparison cells judged per second through the judge run job, demo model as a "
                                 f"pointwise judge, {CELLS} cells", unit="cells/s", value=ours,
        baseline_what="the same judge run one request at a time (its worker with INFERENCE_MAX_BATCH_SIZE=1)",
        baseline_value=one, target="ratio >= 4", passed=ratio >= 4 and all(c == CELLS for c in judged),
        ratio=ratio, extra=extra)])


if __name__ == "__main__":
    run()
