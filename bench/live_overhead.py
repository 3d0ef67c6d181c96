"""Training throughput with live metrics on (the worker's callbacks) vs off (no-op callbacks).

Ours: `workers.training.train` with `apps.training.runner.JobCallbacks` on a job row — what the
training worker passes: every optimizer step upserts its metric point (PostgreSQL), updates the
job's step and tokens and publishes the point to the channel layer (Redis db 5), and
`should_stop` reads the job's cancel flag before every step. Baseline: the same `train` call with
the engine's no-op `TrainCallbacks`. Same config, data and seed; runs alternate (off, on, on,
off, ...) in this process so that load from other work on the machine falls on both.

Throughput = non-padding tokens trained / wall time of the fit, from the end of `on_start` to the
return of the last `on_step` (so each step's callbacks are inside it; model load, tokenization,
the final evaluation and adapter save are not). The `tokens_per_s` of the step points is not used:
the engine times a step before it calls back, so it cannot see the callbacks. The time spent
inside the callbacks (on_step + should_stop) is also summed directly, a noise-free estimate of
the same overhead.

Two models:
- the demo model (SmolLM2-135M-Instruct, fp32, CPU; converted once into $WORKBENCH_BENCH_CACHE
  as for generate_batched), DEMO_STEPS steps of 2 packed rows of up to 128 tokens: steps of a
  realistic size on this machine (the headline, target ratio >= 0.99);
- the tests' tiny Llama (2 layers, hidden 32), TINY_STEPS steps of a few milliseconds: there the
  per-step cost of the callbacks dominates and is what the row shows (reported, no target).

The worker's heartbeat thread (a JobRun's, apps.core.jobs, one UPDATE every few seconds) is
not started, and no websocket viewer is connected (a group_send to an empty group). PostgreSQL at
BENCH_PG_URL; database `bench_live_overhead`, created fresh and dropped at the end. About 2 minutes.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from bench.stack import django_already_set_up, rerun_in_child

# OpenMP's default spin-waiting makes a small step many times slower when other work shares the
# cores (see train_lora); set before torch is imported (it is not, when run as `python -m bench`).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DATABASE = "bench_live_overhead"
TARGET_RATIO = 0.99
DEMO_STEPS = int(os.environ.get("BENCH_LIVE_DEMO_STEPS", "6"))
DEMO_ROUNDS = 2  # each round: off, on, on, off
TINY_STEPS = int(os.environ.get("BENCH_LIVE_TINY_STEPS", "300"))
TINY_ROUNDS = 2


def _timed(base):
    """`base` (a callbacks class) that records when the fit starts and each step's callbacks end,
    and how long its own on_step / should_stop took."""

    class Timed(base):
        def __init__(self, *args):
            super().__init__(*args)
            self.fit_started = self.last_step_end = 0.0
            self.callback_s = 0.0
            self.tokens = 0
            self.steps = 0

        def on_start(self, **kwargs):
            super().on_start(**kwargs)
            self.fit_started = time.perf_counter()

        def should_stop(self):
            started = time.perf_counter()
            try:
                return super().should_stop()
            finally:
                self.callback_s += time.perf_counter() - started

        def on_step(self, point):
            started = time.perf_counter()
            super().on_step(point)
            self.last_step_end = time.perf_counter()
            self.callback_s += self.last_step_end - started
            self.tokens, self.steps = point["tokens_seen"], point["step"]

        @property
        def fit_s(self):
            return self.last_step_end - self.fit_started

    return Timed


def _job(project, owner, name: str):
    from bench.live_latency import _job

    return _job(project, owner, name)


def _measure(label: str, model_dir: Path, rows: list[dict], config_overrides: dict, steps: int, rounds: int,
             job, work_dir: Path) -> dict:
    from apps.training.models import MetricPoint
    from apps.training.runner import JobCallbacks
    from workers.training import TrainConfig, train
    from workers.training.loop import TrainCallbacks

    config = dict(max_steps=steps, eval_at_start=False, eval_every=None, checkpoint_every=steps * 10,
                  lora_dropout=0.0, seed=42, device="cpu", **config_overrides)
    sides = {"off": {"seconds": 0.0, "tokens": 0, "callback_s": 0.0, "runs": []},
             "on": {"seconds": 0.0, "tokens": 0, "callback_s": 0.0, "runs": []}}

    def once(side: str, n: int, steps: int = steps) -> None:
        output = work_dir / f"{label}-{side}-{n}"
        if side == "on":
            MetricPoint.objects.filter(job=job).delete()  # every run upserts new rows, as a fresh job would
            callbacks = _timed(JobCallbacks)(job)
        else:
            callbacks = _timed(TrainCallbacks)()
        train(TrainConfig(**{**config, "max_steps": steps}), model_dir=model_dir, output_dir=output, train_rows=rows, eval_rows=[],
              callbacks=callbacks)
        assert callbacks.steps == steps, (callbacks.steps, steps)
        shutil.rmtree(output, ignore_errors=True)
        entry = sides[side]
        entry["seconds"] += callbacks.fit_s
        entry["tokens"] += callbacks.tokens
        entry["callback_s"] += callbacks.callback_s
        print(f"    {label} {side}: {callbacks.fit_s:.2f} s, {callbacks.tokens / callbacks.fit_s:,.0f} tok/s", flush=True)
        entry["runs"].append({"fit_s": round(callbacks.fit_s, 3), "tokens": callbacks.tokens,
                              "callback_ms_per_step": round(callbacks.callback_s / steps * 1000, 3),
                              "tokens_per_s": round(callbacks.tokens / callbacks.fit_s, 1),
                              "load_1m": round(os.getloadavg()[0], 2)})

    once("off", -1, 2)  # warm: imports, first-touch of memory, PostgreSQL and Redis connections
    once("on", -1, 2)
    for side in sides.values():
        side.update(seconds=0.0, tokens=0, callback_s=0.0, runs=[])
    n = 0
    for round_ in range(rounds):
        for side in (("off", "on", "on", "off") if round_ % 2 == 0 else ("on", "off", "off", "on")):
            once(side, n)
            n += 1
    off, on = sides["off"], sides["on"]
    runs_per_side = len(on["runs"])
    stats = {
        "steps_per_run": steps, "runs_per_side": runs_per_side,
        "off_tokens_per_s": round(off["tokens"] / off["seconds"], 2),
        "on_tokens_per_s": round(on["tokens"] / on["seconds"], 2),
        "off_step_ms": round(off["seconds"] / (steps * runs_per_side) * 1000, 3),
        "on_step_ms": round(on["seconds"] / (steps * runs_per_side) * 1000, 3),
        "on_callback_ms_per_step": round(on["callback_s"] / (steps * runs_per_side) * 1000, 3),
        "off_callback_ms_per_step": round(off["callback_s"] / (steps * runs_per_side) * 1000, 4),
        "callback_share_of_fit": round(on["callback_s"] / on["seconds"], 5),
        "runs": {"off": off["runs"], "on": on["runs"]},
    }
    assert off["tokens"] == on["tokens"], "both sides train the same tokens"
    stats["ratio"] = stats["on_tokens_per_s"] / stats["off_tokens_per_s"]
    print(f"  {label}: off {stats['off_tokens_per_s']:,.1f} tok/s ({stats['off_step_ms']:.1f} ms/step), "
          f"on {stats['on_tokens_per_s']:,.1f} tok/s ({stats['on_step_ms']:.1f} ms/step), ratio {stats['ratio']:.4f}; "
          f"callbacks {stats['on_callback_ms_per_step']:.2f} ms/step = {stats['callback_share_of_fit']:.2%} of the fit",
          flush=True)
    return stats


def _breakdown(job, calls: int = 200) -> dict:
    """Mean ms of each thing JobCallbacks does per step, timed alone (the same statements and calls)."""
    from apps.training import events
    from apps.training.models import MetricPoint, TrainingJob
    from apps.training.runner import JobCallbacks

    callbacks = JobCallbacks(job)
    point = {"step": 0, "epoch": 0.0, "loss": 2.0, "lr": 2e-4, "grad_norm": 1.0, "tokens_per_s": 1000.0,
             "tokens_seen": 0, "memory_mb": 900.0, "elapsed_s": 0.0}
    parts = {
        "upsert_metric_point": lambda i: MetricPoint.objects.bulk_create(
            [MetricPoint(job_id=job.pk, kind="train", step=100_000 + i, values={**point, "step": 100_000 + i})],
            update_conflicts=True, unique_fields=["job", "kind", "step"], update_fields=["values", "recorded_at"]),
        "update_job_step": lambda i: TrainingJob.objects.filter(pk=job.pk).update(current_step=i, tokens_trained=i),
        "should_stop_query": lambda i: callbacks.should_stop(),
        "publish_metric_point": lambda i: events.metric_point(job.pk, "train", {**point, "step": i}),
    }
    out = {}
    for name, call in parts.items():
        call(0)
        started = time.perf_counter()
        for i in range(calls):
            call(i)
        out[name] = round((time.perf_counter() - started) / calls * 1000, 3)
    MetricPoint.objects.filter(job=job).delete()
    return out


def _without_ratio(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "ratio"}  # the result's own "ratio" is the rounded one


def _tiny_rows() -> list[dict]:
    from tests.training.fixtures import QA

    return [{"prompt": p, "response": r} for p, r in QA * 8]


def run() -> list[dict]:
    names = ["live_overhead", "live_overhead_tiny"]
    if django_already_set_up():
        return rerun_in_child("bench.live_overhead", names)
    from bench.stack import live_stack

    with live_stack(DATABASE, prefix="bench-live-overhead-") as stack:
        data_dir = stack.data_dir
        import torch
        from django.contrib.auth import get_user_model

        from apps.projects.services import project_create
        from bench.generate_batched import demo_model_dir
        from bench.report import publish, result
        from bench.train_lora import make_rows
        from tests.workers.test_models import save_tiny_model

        owner = get_user_model().objects.create_user("bench-owner", password="x" * 12)
        project = project_create(user=owner, name="Bench live overhead")
        work = Path(data_dir) / "runs"
        tiny_dir = Path(data_dir) / "tiny"
        tiny_dir.mkdir(parents=True)
        save_tiny_model(tiny_dir, initializer_range=0.3)
        threads = torch.get_num_threads()
        print(f"live_overhead: train with JobCallbacks (on) vs no-op TrainCallbacks (off); tiny model on 1 torch "
              f"thread, demo model on {threads}", flush=True)
        torch.set_num_threads(1)  # 2 threads only add synchronisation to a model this small
        tiny = _measure("tiny Llama", tiny_dir, _tiny_rows(),
                        {"batch_size": 4, "max_seq_len": 32, "lora_r": 4, "lora_alpha": 8, "learning_rate": 1e-3},
                        TINY_STEPS, TINY_ROUNDS, _job(project, owner, "tiny"), work)
        torch.set_num_threads(threads)
        breakdown = _breakdown(_job(project, owner, "breakdown"))
        print("  per step, timed alone (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in breakdown.items()), flush=True)
        demo = _measure("demo model", demo_model_dir(), make_rows(64, 7),
                        {"batch_size": 2, "max_seq_len": 128, "target_modules": ["q_proj", "v_proj"]},
                        DEMO_STEPS, DEMO_ROUNDS, _job(project, owner, "demo"), work)
    common = {"load_average_end": os.getloadavg(),
              "callback_breakdown_ms": breakdown, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
             "callbacks": "apps.training.runner.JobCallbacks (PostgreSQL upsert + job update + channel-layer "
                           "publish per step, cancel check before each step)"}
    return publish([
        result(name="live_overhead", metric="tokens/s of train() with live metrics on / off, demo model (fp32 CPU)",
               unit="ratio", value=demo["ratio"], baseline_what="no-op TrainCallbacks, same config, interleaved",
               baseline_value=1.0, ratio=demo["ratio"], target=f"ratio >= {TARGET_RATIO:g}",
               passed=demo["ratio"] >= TARGET_RATIO, extra={**_without_ratio(demo), **common, "model": "SmolLM2-135M-Instruct"}),
        result(name="live_overhead_tiny", metric="tokens/s of train() with live metrics on / off, tiny Llama "
                                                 "(per-step cost of the callbacks)",
               unit="ratio", value=tiny["ratio"], baseline_what="no-op TrainCallbacks, same config, interleaved",
               baseline_value=1.0, ratio=tiny["ratio"], target="reported", passed=True,
               extra={**_without_ratio(tiny), **common, "model": "tests' tiny Llama (2 layers, hidden 32)"}),
    ])


if __name__ == "__main__":
    run()
