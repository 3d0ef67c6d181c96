"""16 concurrent `openai` clients streaming chat completions from `/v1` (#18 Benchmarks,
`serve_concurrent`): aggregate tokens/s and time to first token through the whole serving path.

Ours: the production web server (uvicorn as `manage.py up` starts it, one process;
BENCH_SERVE_WEB_WORKERS=2 for what `up` starts on PostgreSQL on 2 cores) and an `inference`
Celery worker (threads, 16) on PostgreSQL and Redis (BENCH_LIVE_REDIS_URL, db 5 by default,
flushed); the demo model (SmolLM2-135M-Instruct fp32 CPU, converted once as for generate_batched)
registered ready in a project, a project API token. Each client is the official `openai` package
(`OpenAI(base_url=.../v1)`), `stream=True`, `stream_options.include_usage`, greedy, max_tokens
NEW_TOKENS, one of CLIENTS prompts of mixed lengths (a question to a few paragraphs). A round: the
CLIENTS threads released together by a barrier, one request each. TTFT = from the create call to
the first chunk with content; tokens = the final usage chunk's completion_tokens; aggregate tokens/s
= all completion tokens of a round / (last stream's end - the barrier's release). Single-client TTFT:
SINGLE requests one at a time (the same prompts), before the rounds.

Baseline, same run, when BENCH_LLAMA_CPP_PYTHON names a Python with `llama-cpp-python[server]`
(not a dependency: `python3 -m venv /tmp/llama-venv && /tmp/llama-venv/bin/pip install
'llama-cpp-python[server]'` builds llama.cpp, a few minutes): its OpenAI-compatible server
(`python -m llama_cpp.server`, `--interrupt_requests False` so a new request does not cancel the
running one, `--n_threads` the machine's cores) on the demo model's own GGUF file (the one the
workbench converts), the same clients and prompts. Rounds alternate ours, theirs, theirs, ours.

Targets (the issue's): aggregate tokens/s >= 2x llama.cpp's; our TTFT p99 <= 1.5 s and <= 3x our
single-client TTFT (p50). Without the baseline only our figures are reported.

PostgreSQL at BENCH_PG_URL; database `bench_serve_concurrent`, created fresh and dropped at the
end. About 3 minutes (5 with the baseline).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

from bench.stack import django_already_set_up, free_port, rerun_in_child

DATABASE = "bench_serve_concurrent"
CLIENTS = int(os.environ.get("BENCH_SERVE_CLIENTS", "16"))
NEW_TOKENS = 64
ROUNDS = int(os.environ.get("BENCH_SERVE_ROUNDS", "2"))  # per side
SINGLE = 4
# Web processes: 1 unless set (`manage.py up` on PostgreSQL starts settings.WEB_WORKERS: one per core, 2 here).
WEB_WORKERS = int(os.environ.get("BENCH_SERVE_WEB_WORKERS", "1"))
MODEL = "demo"

_TOPICS = ["the water cycle", "how a bicycle stays upright", "why the sky is blue", "what a compiler does",
           "how bread rises", "the causes of the seasons", "how vaccines train the immune system",
           "what a database index is", "how tides work", "why ice floats", "how a rainbow forms",
           "what photosynthesis makes", "how a refrigerator cools", "why leaves change colour",
           "how sound travels", "what an API is"]


def prompts(count: int) -> list[str]:
    """Mixed lengths: every fourth a one-line question, the others with 1-3 paragraphs of context."""
    context = ("Here are my notes so far. I have read a textbook chapter and a few articles about it, and I "
               "want to check my understanding before a test next week. Some sources disagree on details. ")
    out = []
    for i in range(count):
        topic = _TOPICS[i % len(_TOPICS)]
        out.append(f"Explain {topic} in two sentences." if i % 4 == 0
                   else context * (i % 4) * 2 + f"Now explain {topic} in two sentences.")
    return out


def _stream(client, model: str, prompt: str) -> dict:
    started = time.monotonic()
    first = None
    tokens = chunks = 0
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=NEW_TOKENS, temperature=0,
        stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            chunks += 1
            if first is None:
                first = time.monotonic()
        if getattr(chunk, "usage", None) is not None:
            tokens = chunk.usage.completion_tokens
    ended = time.monotonic()
    # A server that sends no usage chunk streams a token a chunk (llama.cpp's does).
    return {"ttft": (first or ended) - started, "end": ended, "tokens": tokens or chunks}


def _round(base_url: str, key: str, model: str, texts: list[str]) -> dict:
    from openai import OpenAI

    barrier = threading.Barrier(len(texts) + 1)
    results: list[dict | None] = [None] * len(texts)
    errors: list[str] = []

    def client(i: int) -> None:
        api = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=600)
        barrier.wait()
        try:
            results[i] = _stream(api, model, texts[i])
        except Exception as exc:  # noqa: BLE001 - a failed request is counted, the round goes on
            errors.append(f"{type(exc).__name__}: {exc}"[:300])

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    barrier.wait()
    released = time.monotonic()
    for thread in threads:
        thread.join(900)
    done = [r for r in results if r]
    wall = max(r["end"] for r in done) - released if done else float("inf")
    return {"ttfts": [r["ttft"] for r in done], "tokens": sum(r["tokens"] for r in done), "wall": wall,
            "errors": errors}


def _single(base_url: str, key: str, model: str, texts: list[str]) -> list[float]:
    from openai import OpenAI

    api = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=600)
    return [_stream(api, model, text)["ttft"] for text in texts]


def _start_llama_cpp(stack, python: str, gguf) -> str:
    """llama-cpp-python's OpenAI-compatible server, stopped with the stack; returns its /v1 URL."""
    import requests

    port = free_port()
    process = stack.spawn(
        [python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", MODEL, "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "4096", "--n_threads", str(os.cpu_count() or 1),
         "--interrupt_requests", "False"], cwd=None, env=None, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return f"http://127.0.0.1:{port}/v1"
        except requests.RequestException:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("llama_cpp.server did not start")
        time.sleep(0.5)


def _side(rounds: list[dict]) -> dict:
    from bench.report import percentile

    ttfts = [t for r in rounds for t in r["ttfts"]]
    tokens, wall = sum(r["tokens"] for r in rounds), sum(r["wall"] for r in rounds)
    return {"tokens_per_s": tokens / wall if wall else 0.0, "ttft_p50_s": percentile(ttfts, 50) if ttfts else None,
            "ttft_p99_s": percentile(ttfts, 99) if ttfts else None, "ttft_max_s": max(ttfts, default=None),
            "completion_tokens": tokens, "failed": sum(len(r["errors"]) for r in rounds),
            "errors": [e for r in rounds for e in r["errors"]][:5],
            "rounds": [{"tokens": r["tokens"], "wall_s": round(r["wall"], 3)} for r in rounds]}


def run() -> list[dict]:
    names = ["serve_concurrent_tokens_per_s", "serve_concurrent_ttft_p99"]
    if django_already_set_up():
        return rerun_in_child("bench.serve_concurrent", names)
    from bench.stack import live_stack

    llama_python = os.environ.get("BENCH_LLAMA_CPP_PYTHON", "")
    texts = prompts(CLIENTS)
    ours: list[dict] = []
    theirs: list[dict] = []
    with live_stack(DATABASE, prefix="bench-serve-") as stack:
        from django.db import connection

        from bench.generate_batched import demo_model_dir
        from bench.report import percentile, publish, result
        from bench.stack import seed_demo
        from workers.models import demo_model_gguf

        key = seed_demo(demo_model_dir(), project="Bench serving", model=MODEL).key
        connection.close()
        address = stack.start_web(workers=WEB_WORKERS)
        stack.start_worker()
        our_url = f"http://{address}/v1"
        _single(our_url, key, MODEL, texts[:2])  # the worker loads the model
        single = _single(our_url, key, MODEL, texts[:SINGLE])
        llama_url = _start_llama_cpp(stack, llama_python, demo_model_gguf()) if llama_python else ""
        if llama_url:
            _single(llama_url, "none", MODEL, texts[:2])
        order = (["ours", "theirs", "theirs", "ours"] * ROUNDS)[: 2 * ROUNDS] if llama_url else ["ours"] * ROUNDS
        for side in order:
            if side == "ours":
                ours.append(_round(our_url, key, MODEL, texts))
            else:
                theirs.append(_round(llama_url, "none", MODEL, texts))
            print(f"  {side}: {(ours if side == 'ours' else theirs)[-1]['tokens']} tokens in "
                  f"{(ours if side == 'ours' else theirs)[-1]['wall']:.1f} s")

    us = _side(ours)
    them = _side(theirs) if theirs else None
    single_p50 = percentile(single, 50)
    extra = {"clients": CLIENTS, "new_tokens": NEW_TOKENS, "rounds_per_side": ROUNDS, "ours": us, "llama_cpp": them,
             "single_client_ttft_s": [round(t, 4) for t in single], "single_client_ttft_p50_s": round(single_p50, 4),
             "load_average_1m_after": round(os.getloadavg()[0], 2),
             "stack": f"openai clients -> uvicorn ({WEB_WORKERS} process(es)) -> celery inference worker (threads, 16) -> demo model "
                      "fp32 CPU; PostgreSQL, Redis"}
    ttft_ok = us["ttft_p99_s"] is not None and us["ttft_p99_s"] <= 1.5 and us["ttft_p99_s"] <= 3 * single_p50
    print(f"serve_concurrent: ours {us['tokens_per_s']:.1f} tokens/s, TTFT p50 {us['ttft_p50_s']:.2f} s p99 "
          f"{us['ttft_p99_s']:.2f} s (single client p50 {single_p50:.2f} s), {us['failed']} failed"
          + (f"; llama.cpp {them['tokens_per_s']:.1f} tokens/s, TTFT p50 {them['ttft_p50_s']:.2f} s p99 "
             f"{them['ttft_p99_s']:.2f} s" if them else "; llama.cpp not measured (BENCH_LLAMA_CPP_PYTHON unset)"))
    throughput = result(
        name="serve_concurrent_tokens_per_s", metric=f"aggregate tokens/s, {CLIENTS} streaming openai clients",
        unit="tok/s", value=us["tokens_per_s"],
        baseline_what="llama-cpp-python's server, same GGUF model, clients and prompts",
        baseline_value=them["tokens_per_s"] if them else 0.0,
        ratio=us["tokens_per_s"] / them["tokens_per_s"] if them and them["tokens_per_s"] else None,
        target=">= 2x llama.cpp", passed=bool(them) and us["tokens_per_s"] >= 2 * them["tokens_per_s"]
        and us["failed"] == 0, extra=extra)
    if not them:  # no baseline measured in this run: shown as "—", not as a ratio to 0
        throughput["baseline"]["value"], throughput["ratio"] = None, None
    return publish([
        throughput,
        result(name="serve_concurrent_ttft_p99", metric=f"time to first token p99, {CLIENTS} concurrent clients",
               unit="s", value=us["ttft_p99_s"], baseline_what="our single-client TTFT p50",
               baseline_value=single_p50, target="<= 1.5 s and <= 3x single", passed=ttft_ok and us["failed"] == 0,
               extra=extra),
    ])


if __name__ == "__main__":
    run()
