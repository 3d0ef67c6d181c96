"""What constrained JSON decoding costs a decoding step (#18's response_format, #20's local judges):
16 judge prompts (bench/judge_job.py's rubric, the demo model, fp32 CPU) decoded together in one
DecodeBatch, each answer constrained to the rubric's answer schema (workers.inference.constrain:
llguidance computes each row's allowed tokens before its token is chosen), against the same
prompts decoded freely, same run, alternating free, constrained, constrained, free (ROUNDS of each).

The answers differ (the constrained ones are the verdict objects, the free ones whatever the
model writes), so the sides are compared per decoding step while all 16 rows are still in the
batch: the mean step time at full occupancy. The time inside the constraint (computing and
applying the mask, consuming the chosen token) is also timed directly, per row and token. Every
constrained answer that ended by itself (not at the MAX_TOKENS cap) must parse.
"""

from __future__ import annotations

import statistics
import time

from bench.generate_batched import QUESTIONS, demo_model_dir
from bench.judge_job import ANSWERS, MAX_TOKENS, RUBRIC
from bench.report import publish, result

ROWS = 16
ROUNDS = 2


def run() -> list[dict]:
    import torch

    from workers.inference import constrain
    from workers.inference.cache import load_for_inference
    from workers.inference.decode import DecodeBatch, Sequence
    from workers.inference.params import SamplingParams
    from workers.inference.prompts import render_prompt
    from workers.judging import answer_schema, check_rubric, judge_messages, parse_answer

    path = demo_model_dir()
    model, tokenizer = load_for_inference(path, roots=[path.parent])
    rubric = check_rubric(RUBRIC)
    schema = answer_schema(rubric)
    ids = [tokenizer(render_prompt(tokenizer, messages=judge_messages(rubric, QUESTIONS[i], response=ANSWERS[i])),
                     add_special_tokens=False)["input_ids"] for i in range(ROWS)]

    inside = {"seconds": 0.0, "calls": 0}
    restrict, accept = constrain.Constraint.restrict, constrain.Constraint.accept

    def timed(method):
        def wrapper(self, *args):
            started = time.perf_counter()
            try:
                return method(self, *args)
            finally:
                inside["seconds"] += time.perf_counter() - started
                inside["calls"] += method is restrict
        return wrapper
    constrain.Constraint.restrict, constrain.Constraint.accept = timed(restrict), timed(accept)

    def decode(constrained: bool) -> dict:
        batch = DecodeBatch(model, tokenizer, max_rows=ROWS)
        params = SamplingParams(max_new_tokens=MAX_TOKENS, json_schema=schema if constrained else None)
        started = time.perf_counter()
        sequences = [Sequence(row, params, started=started,
                              constraint=batch.constrain(schema) if constrained else None) for row in ids]
        inside.update(seconds=0.0, calls=0)
        batch.admit(sequences)
        full = []
        while batch.rows:
            rows, begun = len(batch.rows), time.perf_counter()
            batch.step()
            if rows == ROWS:
                full.append(time.perf_counter() - begun)
        ended = [s for s in sequences if s.result.finish_reason == "stop"]  # the others met the cap
        return {"full_steps": full, "inside_s": inside["seconds"], "inside_calls": inside["calls"],
                "ended": len(ended), "parsed": sum(parse_answer(s.result.text, rubric)[0] is not None for s in ended)}

    runs: dict[bool, list[dict]] = {False: [], True: []}
    try:
        decode(True), decode(False)  # warm: the vocabulary wrapped, the kernels for these shapes
        for _ in range(ROUNDS):
            for constrained in (False, True, True, False):
                runs[constrained].append(decode(constrained))
    finally:  # the timers come off, whoever imported this
        constrain.Constraint.restrict, constrain.Constraint.accept = restrict, accept
    step_ms = {side: 1000 * statistics.mean(s for r in measured for s in r["full_steps"])
               for side, measured in runs.items()}
    steps = {side: sum(len(r["full_steps"]) for r in measured) for side, measured in runs.items()}
    per_token_ms = 1000 * sum(r["inside_s"] for r in runs[True]) / max(1, sum(r["inside_calls"] for r in runs[True]))
    parsed = {side: runs[side][0]["parsed"] for side in runs}
    ended = {side: runs[side][0]["ended"] for side in runs}
    ratio = step_ms[False] / step_ms[True]
    print(f"constrain_overhead: {ROWS} judge prompts decoded together, at most {MAX_TOKENS} new tokens, demo model "
          f"fp32 on {torch.get_num_threads()} CPU threads, {ROUNDS * 2} runs a side")
    print(f"  {'side':<26} {'step at 16 rows':>16} {'steps':>6} {'ended by itself':>16} {'of those parsed':>16}")
    for side, label in ((False, "free"), (True, "constrained to the schema")):
        print(f"  {label:<26} {step_ms[side]:>14.1f}ms {steps[side]:>6} {ended[side]:>13}/{ROWS} "
              f"{parsed[side]:>13}/{ended[side]}")
    print(f"  inside the constraint: {per_token_ms:.3f} ms a row and token (mask, apply, consume)")
    return publish([result(
        name="constrain_overhead", metric=f"mean decoding step, {ROWS} rows, each constrained to a JSON schema",
        unit="ms", value=step_ms[True], baseline_what="the same rows decoded freely", baseline_value=step_ms[False],
        target="reported; every answer that ended parses", passed=parsed[True] == ended[True], ratio=ratio,
        extra={"constraint_ms_per_row_token": round(per_token_ms, 4), "ended": ended[True], "parsed": parsed[True],
               "baseline_ended": ended[False], "baseline_parsed": parsed[False], "steps_at_full_occupancy": steps[True],
               "baseline_steps_at_full_occupancy": steps[False], "torch_threads": torch.get_num_threads()})])


if __name__ == "__main__":
    run()
