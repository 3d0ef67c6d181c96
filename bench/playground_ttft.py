"""Time to first token through the whole stack: browser websocket -> playground consumer ->
Celery `inference` worker -> the demo model -> channel layer -> websocket.

Ours: the production web server (`python -m uvicorn workbench.asgi:application`, one process)
and an `inference` Celery worker (`--pool threads --concurrency 16`, both as `manage.py up` starts
them) on PostgreSQL and Redis db 5 (broker, channel layer, cache); the demo model
(SmolLM2-135M-Instruct, fp32, CPU, converted once into $WORKBENCH_BENCH_CACHE as for
generate_batched) registered ready in a project. A client (the `websockets` package) logged in
with a session cookie connects to `ws/projects/<id>/playground/` and sends
{"type": "generate", "model", "messages": [one user question], "params": {max_new_tokens, greedy}};
TTFT = from just before the send to the first "delta" message parsed. The next request is sent
once "done" came. REQUESTS requests, one at a time (the playground of one person); two warm-up
requests first (the worker loads the model on the first).

Reference, same run: the engine alone in this process — `workers.inference.generate_batch` on the
same warm model (loaded here with the same loader, fp32) with the same rendered prompt and params,
`on_token`: TTFT = from the call to the first on_token. One engine request after each stack
request, so load from other work falls on both. Ratio = stack p50 / engine p50 (and the same for
p99): what the stack adds (Django, PostgreSQL writes, the Celery hop, the batcher's wait of
INFERENCE_MAX_WAIT_MS, the channel layer). The issue sets no target: reported.

PostgreSQL at BENCH_PG_URL; database `bench_live_ttft`, created fresh and dropped at the end.
About 2 minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from bench.stack import django_already_set_up, rerun_in_child

DATABASE = "bench_live_ttft"
REQUESTS = int(os.environ.get("BENCH_TTFT_REQUESTS", "20"))
WARMUP = 2
NEW_TOKENS = 8
QUESTION = "What is the capital of France?"


def _seed(model_dir):
    from bench.stack import seed_demo, session_cookie

    demo = seed_demo(model_dir, project="Bench playground", model="SmolLM2-135M-Instruct",
                     username="bench-scientist", token=None)
    return demo.project.pk, demo.model.pk, session_cookie(demo.user)


async def _stack_request(socket_, model_id: int) -> dict:
    """One generation over the open socket: (ttft_s, total_s, deltas, server's result)."""
    body = {"type": "generate", "model": model_id, "messages": [{"role": "user", "content": QUESTION}],
            "params": {"max_new_tokens": NEW_TOKENS, "temperature": 0}}
    started = time.monotonic()
    await socket_.send(json.dumps(body))
    first, deltas = None, []
    while True:
        message = json.loads(await asyncio.wait_for(socket_.recv(), 120))
        if message["type"] == "delta":
            if first is None:
                first = time.monotonic()
            deltas.append(message["text"])
        elif message["type"] in ("done", "error"):
            ended = time.monotonic()
            if message["type"] == "error" or message["result"].get("error"):
                raise RuntimeError(f"generation failed: {message}")
            return {"ttft_s": first - started, "total_s": ended - started, "text": "".join(deltas),
                    "worker_ttft_s": message["result"].get("time_to_first_token_s")}
        elif message["type"] != "started":
            raise RuntimeError(f"unexpected message {message}")


def run() -> list[dict]:
    names = ["playground_ttft_p50", "playground_ttft_p99"]
    if django_already_set_up():
        return rerun_in_child("bench.playground_ttft", names)
    from bench.stack import live_stack

    with live_stack(DATABASE, prefix="bench-ttft-") as live:
        import torch
        from django.db import connection

        from bench.generate_batched import demo_model_dir
        from bench.report import percentile, publish, result
        from workers.inference import SamplingParams, generate_batch, render_prompt
        from workers.models import load_for_inference

        model_dir = demo_model_dir()
        project_id, model_id, cookie = _seed(model_dir)
        connection.close()
        address = live.start_web()
        live.start_worker()
        net, tokenizer = load_for_inference(model_dir, device="cpu", dtype="fp32")
        prompt = render_prompt(tokenizer, messages=[{"role": "user", "content": QUESTION}])
        params = SamplingParams(max_new_tokens=NEW_TOKENS)

        def engine() -> dict:
            marks = {}
            started = time.monotonic()

            def on_token(index: int, text: str) -> None:
                marks.setdefault("first", time.monotonic())

            out = generate_batch(net, tokenizer, [prompt], params, on_token=on_token)[0]
            return {"ttft_s": marks["first"] - started, "total_s": time.monotonic() - started, "text": out.text}

        async def measure() -> dict:
            import websockets

            stack, solo, load = [], [], []
            async with websockets.connect(f"ws://{address}/ws/projects/{project_id}/playground/", origin=live.origin,
                                          additional_headers={"Cookie": cookie}) as socket_:
                for _ in range(WARMUP):
                    await _stack_request(socket_, model_id)
                    engine()
                for _ in range(REQUESTS):
                    load.append(os.getloadavg()[0])
                    stack.append(await _stack_request(socket_, model_id))
                    solo.append(engine())
            return {"stack": stack, "solo": solo, "load": load}

        measured = asyncio.run(measure())

    stack_ms = [r["ttft_s"] * 1000 for r in measured["stack"]]
    solo_ms = [r["ttft_s"] * 1000 for r in measured["solo"]]
    worker_ms = [r["worker_ttft_s"] * 1000 for r in measured["stack"] if r["worker_ttft_s"] is not None]
    same_text = sum(s["text"] == e["text"] for s, e in zip(measured["stack"], measured["solo"]))
    stats = {f"{side}_p{q}_ms": round(percentile(samples, q), 2)
             for side, samples in (("stack", stack_ms), ("engine", solo_ms), ("worker_reported", worker_ms))
             for q in (50, 99) if samples}
    stats.update(stack_total_p50_ms=round(percentile([r["total_s"] * 1000 for r in measured["stack"]], 50), 1),
                 engine_total_p50_ms=round(percentile([r["total_s"] * 1000 for r in measured["solo"]], 50), 1))
    print(f"playground_ttft: {REQUESTS} chat requests ({QUESTION!r}, {NEW_TOKENS} new tokens, greedy) one at a time, "
          f"demo model fp32 on {torch.get_num_threads()} CPU threads; same text as the engine: {same_text}/{REQUESTS}")
    print(f"  {'side':<48} {'p50 ms':>8} {'p99 ms':>8} {'total p50 ms':>13}")
    print(f"  {'stack (websocket -> worker -> websocket)':<48} {stats['stack_p50_ms']:>8.1f} "
          f"{stats['stack_p99_ms']:>8.1f} {stats['stack_total_p50_ms']:>13.1f}")
    print(f"  {'engine alone (generate_batch, on_token)':<48} {stats['engine_p50_ms']:>8.1f} "
          f"{stats['engine_p99_ms']:>8.1f} {stats['engine_total_p50_ms']:>13.1f}")
    if worker_ms:
        print(f"  {'the worker reports (time_to_first_token_s)':<48} {stats['worker_reported_p50_ms']:>8.1f} "
              f"{stats['worker_reported_p99_ms']:>8.1f}")
    extra = {"requests": REQUESTS, "new_tokens": NEW_TOKENS, "question": QUESTION, "same_text_as_engine": same_text,
             **stats, "load_average_1m": [round(x, 2) for x in measured["load"]],
             "stack_ttft_ms": [round(x, 1) for x in stack_ms], "engine_ttft_ms": [round(x, 1) for x in solo_ms],
             "model": "SmolLM2-135M-Instruct fp32 (from Q4_1 GGUF), CPU",
             "stack": "uvicorn (1 process) + celery inference worker (threads, 16), PostgreSQL, Redis db 5"}
    results = []
    for q in (50, 99):
        value, base = percentile(stack_ms, q), percentile(solo_ms, q)
        results.append(result(
            name=f"playground_ttft_p{q}", metric=f"p{q} time to first token through the stack (playground websocket, "
                                                "inference worker), demo model", unit="ms", value=value,
            baseline_what="engine alone in-process (generate_batch on_token), same prompt, interleaved",
            baseline_value=base, target="reported", passed=same_text == REQUESTS, extra=extra))
    return publish(results)


if __name__ == "__main__":
    run()
