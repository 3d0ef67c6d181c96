"""Constrained decoding (workers/inference/constrain.py) with the demo model: a sequence given a
JSON schema generates JSON valid against it — alone, beside free rows (which generate what they
generate alone), sampled, and through the Batcher; a schema that cannot be compiled is refused
before anything runs, naming response_format. No database."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.workers.test_inference import save_tiny_chat_model
from workers.inference import Batcher, InferenceInputError, ModelCache, SamplingParams, generate_batch, render_prompt
from workers.inference.constrain import UnconstrainableTokenizer
from workers.judging.rubric import answer_schema, check_rubric, judge_messages, parse_answer
from workers.models import load_for_inference

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "languages"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                         "languages": {"type": "array", "items": {"enum": ["en", "fr", "de"]}, "maxItems": 3}}}
RUBRIC = check_rubric({"kind": "pointwise", "criteria": [
    {"name": "correct", "description": "answers the question correctly", "scale": "1-5"}]})


@pytest.fixture(scope="module")
def demo(demo_model_dir):
    return load_for_inference(demo_model_dir)


def chat(tokenizer, text: str) -> str:
    return render_prompt(tokenizer, messages=[{"role": "user", "content": text}])


def test_a_schema_constrains_the_output_to_valid_json_and_free_rows_beside_it_are_unchanged(demo):
    model, tokenizer = demo
    person = chat(tokenizer, "Describe a French engineer called Marie as JSON.")
    free = chat(tokenizer, "What is the capital of France?")
    alone = generate_batch(model, tokenizer, [free], SamplingParams(max_new_tokens=24))[0]
    # unconstrained, the same request is not JSON at all: the constraint is what makes it parse
    loose = generate_batch(model, tokenizer, [person], SamplingParams(max_new_tokens=48))[0]
    with pytest.raises(ValueError):
        jsonschema.validate(json.loads(loose.text), PERSON)
    constrained, beside = generate_batch(model, tokenizer, [person, free], [
        SamplingParams(max_new_tokens=96, json_schema=PERSON), SamplingParams(max_new_tokens=24)])
    assert constrained.finish_reason == "stop"  # ended by the grammar, whole, not cut at max_new_tokens
    jsonschema.validate(json.loads(constrained.text), PERSON)
    assert beside.token_ids == alone.token_ids
    # sampled rows too, each seed its own valid object
    sampled = generate_batch(model, tokenizer, [person] * 3, [
        SamplingParams(max_new_tokens=96, temperature=1.0, seed=seed, json_schema=PERSON) for seed in (1, 2, 3)])
    for result in sampled:
        if result.finish_reason == "stop":
            jsonschema.validate(json.loads(result.text), PERSON)
    assert sum(r.finish_reason == "stop" for r in sampled) >= 2


def test_json_mode_gives_an_object_and_a_judges_rubric_schema_gives_a_verdict_the_strict_parser_reads(demo):
    model, tokenizer = demo
    prompt = render_prompt(tokenizer, messages=judge_messages(RUBRIC, "What is 7 times 8?", response="56."))
    free = generate_batch(model, tokenizer, [prompt], SamplingParams(max_new_tokens=48))[0]
    assert parse_answer(free.text, RUBRIC)[0] is None  # a 135M model does not write the verdict by itself
    verdict = generate_batch(model, tokenizer, [prompt],
                             SamplingParams(max_new_tokens=64, json_schema=answer_schema(RUBRIC)))[0]
    answer, why = parse_answer(verdict.text, RUBRIC)
    assert why == "" and 1 <= answer["correct"]["score"] <= 5
    anything = generate_batch(model, tokenizer, [chat(tokenizer, "List three colours.")],
                              SamplingParams(max_new_tokens=64, json_schema={"type": "object"}))[0]
    if anything.finish_reason == "stop":
        assert isinstance(json.loads(anything.text), dict)
    else:  # cut at max_new_tokens: a prefix of an object
        assert anything.text.startswith("{") and anything.finish_reason == "length"


def test_through_the_batcher_a_constrained_request_streams_json_and_a_bad_schema_fails_alone(demo_model_dir):
    cache = ModelCache(10**10)
    deltas: list[str] = []
    with Batcher(cache, max_batch_size=8) as batcher:
        good = batcher.submit("demo", demo_model_dir, messages=[{"role": "user", "content": "A person as JSON."}],
                              params=SamplingParams(max_new_tokens=96, json_schema=PERSON), on_token=deltas.append)
        plain = batcher.submit("demo", demo_model_dir, messages=[{"role": "user", "content": "Say hi."}],
                               params=SamplingParams(max_new_tokens=8))
        result = good.result(timeout=240)
        assert plain.result(timeout=240).completion_tokens > 0
    assert "".join(deltas) == result.text
    jsonschema.validate(json.loads(result.text), PERSON)


@pytest.mark.parametrize("schema, why", [
    ("an object please", "is an object"),
    ({"type": "object", "properties": {"a": {"$ref": "#/definitions/nowhere"}}}, "cannot be used"),
    ({"type": "objekt"}, "cannot be used"),
    ({"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100}
                                       for i in range(400)}}, "over"),
    ({"type": "object", "default": float("nan")}, "not JSON"),
])
def test_a_schema_that_cannot_be_compiled_is_refused_naming_response_format(schema, why):
    with pytest.raises(InferenceInputError) as refused:
        SamplingParams(json_schema=schema).validate()
    assert refused.value.field == "response_format" and why in refused.value.message


def test_a_model_whose_tokenizer_cannot_be_constrained_fails_that_request_alone_naming_response_format(tmp_path):
    save_tiny_chat_model(tmp_path / "tiny")  # a word-level tokenizer: no byte-level decoder to build JSON from
    with Batcher(ModelCache(10**9), max_batch_size=4) as batcher:
        shaped = batcher.submit("tiny", tmp_path / "tiny", "paris", SamplingParams(max_new_tokens=4, json_schema=PERSON))
        plain = batcher.submit("tiny", tmp_path / "tiny", "paris", SamplingParams(max_new_tokens=4))
        with pytest.raises(UnconstrainableTokenizer) as refused:
            shaped.result(timeout=60)
        assert plain.result(timeout=60).completion_tokens == 4
    assert refused.value.field == "response_format" and "cannot be constrained" in refused.value.message
