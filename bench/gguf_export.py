"""GGUF export of the demo model (SmolLM2-135M-Instruct, float32 safetensors after its one
conversion): file size, seconds to write and seconds to load back of `workers.models.gguf_export`
at f16 and q8_0, and the greedy agreement of the loaded-back model (4 prompts x 12 tokens).

Baseline, same run: the safetensors export (the model saved with `save_pretrained`, float32, as a
merge writes it) and its load back with `load_for_inference`. Ratios are GGUF / safetensors.

With BENCH_LLAMA_CPP_PYTHON naming a Python that has `llama-cpp-python` (not a dependency; see
bench/serve_concurrent.py for how to install it), each exported file is also loaded by llama.cpp,
the program GGUF files are written for: its tokenizer (read from the file) must split the check
prompts into the same ids as the model's own tokenizer, and its greedy continuation of those ids
(temperature 0, no repeat penalty) is compared token by token with the reference model's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

# Run in BENCH_LLAMA_CPP_PYTHON: argv = the GGUF file, then a JSON list of [prompt text, its ids, count].
_LLAMA_CPP_CHECK = """
import json, sys
from llama_cpp import Llama
model = Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=False)
out = []
for text, ids, count in json.loads(sys.argv[2]):
    tokens = model.tokenize(text.encode(), add_bos=False, special=False)
    model.reset()
    generated = []
    for token in model.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
        generated.append(token)
        if len(generated) == count:
            break
    out.append({"tokenized": tokens, "generated": generated})
print(json.dumps(out))
"""


def llama_cpp_check(python: str, path: Path, prompts: list[dict], tokenizer) -> dict:
    """llama.cpp's reading of an exported file: its tokenization and greedy tokens against the reference's."""
    asked = [[p["prompt"], tokenizer(p["prompt"], add_special_tokens=False)["input_ids"], len(p["reference"])]
             for p in prompts]
    done = subprocess.run([python, "-c", _LLAMA_CPP_CHECK, str(path), json.dumps(asked)], capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        return {"loaded": False, "error": done.stderr.strip()[-500:]}
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    agreeing = compared = 0
    for p, answer in zip(prompts, answers):
        # Free-running tokens agree up to their first difference; after it they continue different texts.
        for expected, got in zip(p["reference"], answer["generated"]):
            if expected != got:
                break
            agreeing += 1
        compared += len(p["reference"])
    return {"loaded": True, "same_tokenization": all(a["tokenized"] == q[1] for a, q in zip(answers, asked)),
            "identical": all(a["generated"] == p["reference"] for a, p in zip(answers, prompts)),
            "prefix_agreement": round(agreeing / compared, 4) if compared else 1.0}


def run() -> list[dict]:
    from bench.generate_batched import demo_model_dir
    from bench.report import publish, result
    from workers.models import load_for_inference
    from workers.models.export_check import compare_greedy, load_gguf_back
    from workers.models.gguf_export import write_gguf

    source = demo_model_dir()
    reference, tokenizer = load_for_inference(source, dtype="fp32")
    work = Path(tempfile.mkdtemp(prefix="bench-gguf-"))
    try:
        started = time.monotonic()
        reference.save_pretrained(work / "safetensors", safe_serialization=True)
        tokenizer.save_pretrained(work / "safetensors")
        baseline_write = time.monotonic() - started
        baseline_size = sum(p.stat().st_size for p in (work / "safetensors").iterdir())
        started = time.monotonic()
        load_for_inference(work / "safetensors", dtype="fp32")
        baseline_load = time.monotonic() - started

        rows = []
        for quantization in ("f16", "q8_0"):
            written = write_gguf(source, work / f"demo-{quantization}.gguf", quantization)
            started = time.monotonic()
            back = load_gguf_back(written.path)
            load_s = time.monotonic() - started
            check = compare_greedy(back, reference, tokenizer)
            if os.environ.get("BENCH_LLAMA_CPP_PYTHON"):
                check["llama_cpp"] = llama_cpp_check(os.environ["BENCH_LLAMA_CPP_PYTHON"], written.path,
                                                     check["prompts"], tokenizer)
                print(f"gguf-{quantization} in llama.cpp: {check['llama_cpp']}")
            rows.append((quantization, written.size_bytes, written.seconds, load_s, check))
            del back
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{'export':<12} {'MB':>8} {'size ratio':>10} {'write s':>8} {'ratio':>6} {'load s':>7} {'ratio':>6} "
          f"{'agreement':>9} identical")
    print(f"{'safetensors':<12} {baseline_size / 1e6:>8.1f} {1:>10.2f} {baseline_write:>8.2f} {1:>6.2f} "
          f"{baseline_load:>7.2f} {1:>6.2f} {'(baseline)':>9}")
    for quantization, size, write_s, load_s, check in rows:
        print(f"{'gguf-' + quantization:<12} {size / 1e6:>8.1f} {size / baseline_size:>10.2f} {write_s:>8.2f} "
              f"{write_s / baseline_write:>6.2f} {load_s:>7.2f} {load_s / baseline_load:>6.2f} "
              f"{check['agreement']:>9.3f} {check['identical']}")
    print()
    results = []
    for quantization, size, write_s, load_s, check in rows:
        results.append(result(
            name=f"gguf_export_{quantization}", metric="file size of the demo model's export", unit="MB",
            value=size / 1e6, baseline_what="the safetensors export (float32)", baseline_value=baseline_size / 1e6,
            target="f16 identical tokens; q8_0 agreement reported" if quantization == "f16" else "reported",
            passed=check["identical"] if quantization == "f16" else True,
            extra={"write_s": write_s, "baseline_write_s": baseline_write, "load_back_s": load_s,
                   "baseline_load_s": baseline_load, "agreement": check["agreement"],
                   "identical": check["identical"], "check_s": check["seconds"],
                   "llama_cpp": check.get("llama_cpp", "not checked (BENCH_LLAMA_CPP_PYTHON unset)")}))
    return publish(results)


if __name__ == "__main__":
    run()
