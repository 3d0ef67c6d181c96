"""GGUF export of the demo model (SmolLM2-135M-Instruct, float32 safetensors after its one
conversion): file size, seconds to write and seconds to load back of `workers.models.gguf_export`
at f16 and q8_0, and the greedy agreement of the loaded-back model (4 prompts x 12 tokens).

Baseline, same run: the safetensors export (the model saved with `save_pretrained`, float32, as a
merge writes it) and its load back with `load_for_inference`. Ratios are GGUF / safetensors.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path


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
                   "identical": check["identical"], "check_s": check["seconds"]}))
    return publish(results)


if __name__ == "__main__":
    run()
