"""Request logging under load (#19 Benchmarks, `capture_overhead`): /v1 throughput with the alias's
capture on (every request, PII redacted) vs off, same run.

The stack of bench/alias_switch.py: the production web server (uvicorn, one process) and an
`inference` Celery worker (threads, 16) on PostgreSQL and Redis, the demo model behind the alias
`Demo@production`. CLIENTS threads loop `POST /v1/chat/completions` (MAX_TOKENS tokens, greedy) with
a prompt carrying an e-mail address and a phone number (the redaction has work to do). Phases of
PHASE_S seconds alternate capture off / on / on / off (ROUNDS rounds; the alias's settings are read
per request, so a phase starts as soon as the alias row is saved); throughput is answered requests
per second over each side's phases. Checked afterwards: no capture kept the raw address, and every
request was captured as the alias said when it ended (a request in flight when its phase switched
ends in the next phase: at most CLIENTS a switch are counted on the other side). Target: ratio >= 0.95.

PostgreSQL at BENCH_PG_URL; database `bench_capture_overhead`, created fresh and dropped at the end.
"""

from __future__ import annotations

import os
import threading
import time

from bench.stack import django_already_set_up, rerun_in_child

DATABASE = "bench_capture_overhead"
CLIENTS = 16
MAX_TOKENS = 8
PHASE_S = float(os.environ.get("BENCH_CAPTURE_PHASE_S", "15"))
ROUNDS = int(os.environ.get("BENCH_CAPTURE_ROUNDS", "1"))
PROMPT = "I am jane.doe@example.com, call me on +44 20 7946 0958. What is the capital of France?"


def _seed(model_dir) -> dict:
    from apps.registry.services import alias_set
    from bench.stack import seed_demo

    demo = seed_demo(model_dir, project="Bench captures")
    alias = alias_set(user=demo.user, model=demo.model, name="production", version=demo.model.pk)
    return {"alias": alias.pk, "key": demo.key}


def _ask(session, address: str, key: str) -> tuple[int, str]:
    answer = session.post(f"http://{address}/v1/chat/completions", timeout=120,
                          headers={"Authorization": f"Bearer {key}"},
                          json={"model": "Demo@production", "max_tokens": MAX_TOKENS, "temperature": 0,
                                "messages": [{"role": "user", "content": PROMPT}]})
    return answer.status_code, answer.json().get("id", "") if answer.status_code == 200 else ""


def _phases(address: str, seeded: dict) -> dict:
    import requests
    from django.db import connection

    from apps.registry.models import ModelAlias

    for _ in range(3):  # the model loaded in the worker before timing
        assert _ask(requests.Session(), address, seeded["key"])[0] == 200
    sides = {True: {"answered": 0, "failed": 0, "seconds": 0.0, "ids": []},
             False: {"answered": 0, "failed": 0, "seconds": 0.0, "ids": []}}
    for _ in range(ROUNDS):
        for capture in (False, True, True, False):
            ModelAlias.objects.filter(pk=seeded["alias"]).update(capture_enabled=capture, capture_redact=True,
                                                                 capture_sample_rate=1.0)
            deadline = time.monotonic() + PHASE_S
            lock = threading.Lock()
            side = sides[capture]

            def client(side=side, deadline=deadline, lock=lock) -> None:
                session = requests.Session()
                while time.monotonic() < deadline:
                    try:
                        status, completion = _ask(session, address, seeded["key"])
                    except requests.RequestException:
                        status, completion = 0, ""
                    with lock:
                        if status == 200:
                            side["answered"] += 1
                            side["ids"].append(completion)
                        else:
                            side["failed"] += 1

            started = time.monotonic()
            threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
            side["seconds"] += time.monotonic() - started
            print(f"  capture {'on ' if capture else 'off'}: {side['answered']} answered so far", flush=True)
    connection.close()
    return sides


def _captured(ids: list[str]) -> dict:
    from apps.serving.models import Capture

    captures = Capture.objects.filter(completion_id__in=ids)
    return {"captures": captures.count(),
            "raw_address_kept": captures.filter(messages__icontains="jane.doe@example.com").count()}


def run() -> list[dict]:
    name = "capture_overhead"
    if django_already_set_up():
        return rerun_in_child("bench.capture_overhead", [name])
    from bench.stack import live_stack

    with live_stack(DATABASE, prefix="bench-capture-") as stack:
        from django.db import connection

        from bench.generate_batched import demo_model_dir
        from bench.report import publish, result

        seeded = _seed(demo_model_dir())
        connection.close()
        address = stack.start_web()
        stack.start_worker()
        sides = _phases(address, seeded)
        time.sleep(2)  # the worker's last captures commit after their answers
        checks = {"on": _captured(sides[True]["ids"]), "off": _captured(sides[False]["ids"])}

    on, off = sides[True], sides[False]
    value, base = on["answered"] / on["seconds"], off["answered"] / off["seconds"]
    straddling = CLIENTS * 4 * ROUNDS  # requests in flight at a phase switch, at most
    clean = (not on["failed"] and not off["failed"] and checks["on"]["raw_address_kept"] == 0
             and checks["on"]["captures"] >= on["answered"] - straddling and checks["off"]["captures"] <= straddling)
    extra = {"clients": CLIENTS, "max_tokens": MAX_TOKENS, "phase_s": PHASE_S, "rounds": ROUNDS,
             "on": {k: v for k, v in on.items() if k != "ids"}, "off": {k: v for k, v in off.items() if k != "ids"},
             "checks": checks, "all_captured_and_redacted": clean,
             "load_average_1m_after": round(os.getloadavg()[0], 2)}
    return publish([result(
        name=name, metric=f"/v1 requests answered per second, {CLIENTS} clients, capture on (every request, "
                          "PII redacted)", unit="req/s", value=value,
        baseline_what="same clients, capture off, phases alternating", baseline_value=base,
        target="ratio >= 0.95", passed=value / base >= 0.95 and clean, extra=extra)])


if __name__ == "__main__":
    run()
