"""A comparison column answered by a provider vs the same model as a local column.

Ours: the production web server (uvicorn, one process) and an `inference` Celery worker
(`--pool threads --concurrency 12`) on PostgreSQL and Redis (BENCH_LIVE_REDIS_URL, default db
5), the demo model (SmolLM2-135M-Instruct, fp32, CPU) registered ready in a project. Site staff
register this server's own `/v1` as a provider (loopback allowlisted, a project API token as its
key, no retries) serving that same model, and enable it for the project. A comparison of PROMPTS
chat prompts x NEW_TOKENS new tokens (greedy) has two columns: the model itself (local: generated
by the worker's batcher) and the provider model (called over HTTP by the worker: /v1 -> a
Generation on the same worker -> its batcher). The runner fills the provider column first, then
the local one, so one comparison times both: provider column = the comparison's start to its
last provider cell stored; local column = from there to its last local cell stored. The model is
warmed first by one /v1 call (it then sits in the worker's cache for both columns).

Reported: the wall-time ratio provider / local (what calling a provider costs over generating
in place: HTTP, the API's checks, budget and rate-limit bookkeeping, a Generation job per cell),
mean of ROUNDS comparisons, and the most requests in flight at the provider, from the /v1
Generations' lifetimes (created_at to finished_at) — COMPARISON_PROVIDER_CONCURRENCY calls are
meant to be in flight, so that a provider is kept busy. Greedy: the two columns' texts are
compared too. The issue sets no target: reported.

PostgreSQL at BENCH_PG_URL; database `bench_provider_overhead`, created fresh and dropped at the
end. About 2 minutes.
"""

from __future__ import annotations

import os
import time

from bench.stack import django_already_set_up, rerun_in_child

DATABASE = "bench_provider_overhead"
PROMPTS = 8
NEW_TOKENS = 16
ROUNDS = 2
WORKER_THREADS = 12  # the comparison's own thread + room for every call in flight


def _seed(model_dir, address: str) -> dict:
    from django.contrib.auth import get_user_model

    from apps.providers import services as providers
    from apps.registry.selectors import model_slug
    from bench.stack import seed_demo

    demo = seed_demo(model_dir, project="Bench provider column", model="SmolLM2-135M-Instruct",
                     username="bench-scientist", token="provider")
    staff = get_user_model().objects.create_user("bench-staff", password="x" * 12, is_staff=True)
    providers.allowlist_add(user=staff, network="127.0.0.1", note="this server")
    provider = providers.provider_create(user=staff, name="Self", base_url=f"http://{address}/v1", api_key=demo.key,
                                         models=[model_slug(demo.model.name)], max_retries=0, timeout_s=300)
    providers.provider_enable(user=staff, provider=provider, project_id=demo.project.pk)
    return {"scientist": demo.user, "project": demo.project, "model": demo.model,
            "provider_model": provider.models.get()}


def _round(seeded: dict, number: int) -> dict:
    from apps.comparison.models import Comparison, Output
    from apps.comparison.services import comparison_create
    from apps.serving.models import Generation
    from bench.generate_batched import QUESTIONS

    since = time.time()
    comparison = comparison_create(user=seeded["scientist"], project=seeded["project"], name=f"Round {number}",
                                   models=[seeded["model"].pk], provider_models=[seeded["provider_model"].pk],
                                   prompts=list(QUESTIONS[:PROMPTS]), params={"max_new_tokens": NEW_TOKENS})
    deadline = time.monotonic() + 600
    while True:
        comparison.refresh_from_db()
        if comparison.state in Comparison.ENDED:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the comparison did not end within 10 minutes")
        time.sleep(0.2)
    if comparison.state != Comparison.State.SUCCEEDED:
        raise RuntimeError(f"the comparison {comparison.state}: {comparison.error}")
    cells = list(Output.objects.filter(comparison=comparison).select_related("contestant", "prompt"))
    called = [c for c in cells if c.contestant.provider_model_id]
    local = [c for c in cells if c.contestant.model_id]
    provider_end = max(c.created_at for c in called)
    texts = {(c.prompt.position, bool(c.contestant.provider_model_id)): c.text for c in cells}
    lifetimes = [(g.created_at.timestamp(), g.finished_at.timestamp()) for g in
                 Generation.objects.filter(source="api", created_at__gte=comparison.created_at)]
    return {"provider_s": (provider_end - comparison.started_at).total_seconds(),
            "local_s": (max(c.created_at for c in local) - provider_end).total_seconds(),
            "errors": sum(bool(c.error) for c in cells), "provider_tokens": sum(c.completion_tokens for c in called),
            "local_tokens": sum(c.completion_tokens for c in local),
            "same_text": sum(texts[(row, True)] == texts[(row, False)] for row in range(PROMPTS)),
            "max_in_flight": _max_overlap(lifetimes), "calls": len(lifetimes), "load_1m": os.getloadavg()[0],
            "wall_s": time.time() - since}


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at the same instant)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def run() -> list[dict]:
    names = ["provider_overhead"]
    if django_already_set_up():
        return rerun_in_child("bench.provider_overhead", names)
    from bench.stack import live_stack

    with live_stack(DATABASE, prefix="bench-provider-") as stack:
        from django.conf import settings
        from django.db import connection

        from apps.providers.services import provider_chat
        from bench.generate_batched import demo_model_dir
        from bench.report import publish, result

        model_dir = demo_model_dir()
        address = stack.start_web()
        seeded = _seed(model_dir, address)
        connection.close()
        stack.start_worker(name="bench-provider", threads=WORKER_THREADS)
        provider_chat(seeded["project"], seeded["provider_model"], [{"role": "user", "content": "Hello"}],
                      max_tokens=2)  # the worker loads the model: both columns find it warm
        rounds = [_round(seeded, n) for n in range(ROUNDS)]
        concurrency = settings.COMPARISON_PROVIDER_CONCURRENCY

    provider_s = sum(r["provider_s"] for r in rounds) / len(rounds)
    local_s = sum(r["local_s"] for r in rounds) / len(rounds)
    ratio = provider_s / local_s
    in_flight = max(r["max_in_flight"] for r in rounds)
    errors = sum(r["errors"] for r in rounds)
    print(f"provider_overhead: a comparison of {PROMPTS} chat prompts x {NEW_TOKENS} new tokens (greedy), the demo "
          f"model as a local column and as a provider column (this server's /v1), {ROUNDS} rounds; "
          f"COMPARISON_PROVIDER_CONCURRENCY={concurrency}")
    print(f"  {'column':<52} {'seconds':>8} {'tokens':>7} {'ratio':>6}")
    print(f"  {'local (the worker batcher, in place)':<52} {local_s:>8.2f} "
          f"{rounds[-1]['local_tokens']:>7} {1:>6.2f}")
    print(f"  {'provider (HTTP /v1 -> Generation -> same batcher)':<52} {provider_s:>8.2f} "
          f"{rounds[-1]['provider_tokens']:>7} {ratio:>6.2f}")
    print(f"  most requests in flight at the provider: {in_flight} (of {PROMPTS} prompts); cells failed: {errors}; "
          f"same text in both columns: {[r['same_text'] for r in rounds]} of {PROMPTS}")
    extra = {"prompts": PROMPTS, "new_tokens": NEW_TOKENS, "rounds": rounds, "provider_concurrency": concurrency,
             "worker_threads": WORKER_THREADS, "max_in_flight": in_flight, "local_s": round(local_s, 3),
             "provider_s": round(provider_s, 3), "model": "SmolLM2-135M-Instruct fp32 (from Q4_1 GGUF), CPU",
             "stack": f"uvicorn (1 process) + celery inference worker (threads, {WORKER_THREADS}), PostgreSQL, Redis"}
    return publish([
        result(name="provider_overhead", metric="wall time of a provider column (this server's /v1) over the same "
                                                "model as a local column", unit="x", value=ratio,
               baseline_what="the same prompts as a local column of the same comparison", baseline_value=1.0,
               target=f"reported; every cell answered, > 1 request in flight (up to {concurrency})",
               passed=errors == 0 and in_flight > 1, ratio=ratio, extra=extra),
    ])


if __name__ == "__main__":
    run()
