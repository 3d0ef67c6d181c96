"""Moving an alias under load (#19 Benchmarks, `alias_switch`): 16 concurrent /v1 clients ask for
`Demo@production`; `production` is moved from the demo model to a LoRA adapter of it; how long
until the new version answers, and whether any request failed meanwhile. No restart: the web
server and the worker read the alias on each request.

Ours: the production web server (uvicorn, one process, as `manage.py up`) and an `inference` Celery
worker (threads, 16) on PostgreSQL and Redis (BENCH_LIVE_REDIS_URL, db 5 by default, flushed); the
demo model (SmolLM2-135M-Instruct fp32 CPU, converted once as for generate_batched) and a LoRA
adapter of it (r 8, q/v, random), both warmed by direct requests first. CLIENTS threads each loop
`POST /v1/chat/completions` (max_tokens 1, greedy) with a project token for BEFORE_S seconds, then
the alias is moved (the service the API calls, `alias_set`: one audited transaction), and they go
on for AFTER_S seconds. Which version answered each request is read afterwards from its generation
row (the completion id is `chatcmpl-<generation id>`).

- first_new_s: from the move's commit to the first response served by the new version (it waits
  for the requests already in the worker's batches, sent before the move: about one request's time);
- all_new_s: from the move's commit to the send time of the last request still served by the old
  version (after it, every request sent was served by the new one; 0 when none was);
- failed: requests that did not answer 200, over the whole run.

Baseline, same run and same 16 clients: the p50 latency of a /v1 request before the move. A move
can be seen no sooner than one request after it, so first_new_s / that p50 ≈ 1 means the move costs
nothing beyond a request's own time. Target (the issue's): all_new_s < 1 s and 0 failed.

PostgreSQL at BENCH_PG_URL; database `bench_alias_switch`, created fresh and dropped at the end.
About a minute.
"""

from __future__ import annotations

import os
import threading
import time

from bench.stack import django_already_set_up, rerun_in_child

DATABASE = "bench_alias_switch"
CLIENTS = 16
BEFORE_S = float(os.environ.get("BENCH_ALIAS_BEFORE_S", "8"))
AFTER_S = float(os.environ.get("BENCH_ALIAS_AFTER_S", "8"))
TARGET_S = 1.0


def _seed(model_dir, data_dir: str) -> dict:
    from pathlib import Path

    from peft import LoraConfig, get_peft_model

    from apps.registry.models import RegisteredModel
    from apps.registry.services import alias_set
    from bench.stack import seed_demo
    from workers.models import load_for_inference

    demo = seed_demo(model_dir, project="Bench aliases")
    user, project, base = demo.user, demo.project, demo.model
    adapter_dir = Path(data_dir) / "adapter"
    net, _ = load_for_inference(model_dir, dtype="fp32")
    lora = get_peft_model(net, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                          init_lora_weights=False))
    lora.save_pretrained(adapter_dir)
    adapter = RegisteredModel.objects.create(
        project=project, name="Demo tuned", kind="adapter", format="peft", base_model=base,
        source_path=str(adapter_dir), weights_path=str(adapter_dir), status="ready", info=base.info)
    alias_set(user=user, model=base, name="production", version=base.pk)
    return {"user_id": user.pk, "base": base.pk, "adapter": adapter.pk, "key": demo.key}


def _ask(session, address: str, key: str, model: str) -> tuple[int, str]:
    answer = session.post(f"http://{address}/v1/chat/completions", timeout=120,
                          headers={"Authorization": f"Bearer {key}"},
                          json={"model": model, "max_tokens": 1, "temperature": 0,
                                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    return answer.status_code, answer.json().get("id", "") if answer.status_code == 200 else ""


def _load(address: str, seeded: dict) -> dict:
    """CLIENTS threads asking for Demo@production; the alias moved after BEFORE_S seconds."""
    import requests
    from django.contrib.auth import get_user_model
    from django.db import connection

    from apps.registry.models import RegisteredModel
    from apps.registry.services import alias_set

    for model in ("Demo", "Demo tuned", "Demo", "Demo tuned"):  # both loaded in the worker before timing
        assert _ask(requests.Session(), address, seeded["key"], model)[0] == 200
    stop = threading.Event()
    records: list[tuple[float, float, int, str]] = []  # (sent, received, status, completion id)
    lock = threading.Lock()

    def client() -> None:
        session = requests.Session()
        while not stop.is_set():
            sent = time.monotonic()
            try:
                status, completion = _ask(session, address, seeded["key"], "Demo@production")
            except requests.RequestException:
                status, completion = 0, ""
            with lock:
                records.append((sent, time.monotonic(), status, completion))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    time.sleep(BEFORE_S)
    owner = get_user_model().objects.get(pk=seeded["user_id"])
    alias_set(user=owner, model=RegisteredModel.objects.get(pk=seeded["base"]), name="production",
              version=seeded["adapter"])
    moved = time.monotonic()  # alias_set returns once its transaction committed
    time.sleep(AFTER_S)
    stop.set()
    for thread in threads:
        thread.join(150)
    connection.close()
    return {"records": records, "moved": moved}


def _served_by(records) -> dict[str, int]:
    from apps.serving.models import Generation

    ids = {int(completion.split("-")[1]): completion for *_, completion in records if completion}
    return {ids[pk]: model for pk, model in Generation.objects.filter(pk__in=ids).values_list("pk", "model_id")}


def run() -> list[dict]:
    names = ["alias_switch_all_new", "alias_switch_first_new"]
    if django_already_set_up():
        return rerun_in_child("bench.alias_switch", names)
    from bench.stack import live_stack

    with live_stack(DATABASE, prefix="bench-alias-") as stack:
        from django.db import connection

        from bench.generate_batched import demo_model_dir
        from bench.report import percentile, publish, result

        seeded = _seed(demo_model_dir(), stack.data_dir)
        connection.close()
        address = stack.start_web()
        stack.start_worker()
        measured = _load(address, seeded)
        served = _served_by(measured["records"])

    moved, records = measured["moved"], measured["records"]
    failed = sum(status != 200 for _, _, status, _ in records)
    before = [received - sent for sent, received, status, _ in records if status == 200 and received < moved]
    new = [(sent, received) for sent, received, status, c in records if served.get(c) == seeded["adapter"]]
    old_after = [sent for sent, _, status, c in records if served.get(c) == seeded["base"] and sent >= moved]
    first_new = min(received for _, received in new) - moved if new else float("inf")
    all_new = max(max(old_after) - moved, 0.0) if old_after else 0.0
    p50 = percentile(before, 50)
    extra = {"load_average_1m_after": round(os.getloadavg()[0], 2), "clients": CLIENTS, "requests": len(records), "failed": failed, "before_s": BEFORE_S, "after_s": AFTER_S,
             "requests_before_move": len(before), "requests_served_by_new": len(new),
             "old_version_requests_sent_after_move": len(old_after), "request_p50_s": round(p50, 4),
             "request_p99_s": round(percentile(before, 99), 4), "first_new_s": round(first_new, 4),
             "all_new_s": round(all_new, 4),
             "stack": "uvicorn (1 process) + celery inference worker (threads, 16), PostgreSQL, Redis; demo model "
                      "fp32 CPU and a LoRA adapter of it; max_tokens 1"}
    print(f"alias_switch: {CLIENTS} clients, {len(records)} requests ({failed} failed), move after {BEFORE_S:g} s; "
          f"request p50 before the move {p50 * 1000:.0f} ms; first response by the new version "
          f"{first_new * 1000:.0f} ms after the move; old version still served for requests sent up to "
          f"{all_new * 1000:.0f} ms after it ({len(old_after)} of them)")
    return publish([
        result(name="alias_switch_all_new", metric="seconds from the alias move until every request sent is served "
                                                   "by the new version (16 clients)", unit="s", value=all_new,
               baseline_what="p50 /v1 request latency before the move, same clients", baseline_value=p50,
               target="< 1 s, 0 failed", passed=all_new < TARGET_S and failed == 0, extra=extra),
        result(name="alias_switch_first_new", metric="seconds from the alias move to the first response served by "
                                                     "the new version", unit="s", value=first_new,
               baseline_what="p50 /v1 request latency before the move, same clients", baseline_value=p50,
               target="reported", passed=failed == 0 and bool(new), extra=extra),
    ])


if __name__ == "__main__":
    run()
