"""The OpenAI-compatible API through the whole stack: the official `openai` client against the
live ASGI server, a real `inference` worker (threads, one model cache) generating with the
tiny model, tokens streamed back over the channel layer."""

import json
from datetime import timedelta

import openai
import pytest
import requests
from django.conf import settings
from django.utils import timezone

from apps.accounts import services as account_services
from apps.serving.models import Generation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def api_id(model) -> str:
    """What /v1/models calls a model: its name as a slug ("Tiny tiny-1a2b" -> "tiny-tiny-1a2b")."""
    return model.name.lower().replace(" ", "-")


def project_token(owner, project, permissions=("project.view", "model.view", "model.generate")) -> str:
    _, raw = account_services.token_create(user=owner, name="api", permissions=list(permissions), project=project,
                                           expires_at=timezone.now() + timedelta(days=1))
    return raw


@pytest.fixture
def client_for(live_asgi):
    def make(raw: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=raw, max_retries=0, timeout=60)
    return make


def test_the_official_client_lists_models_and_completes_chat_with_and_without_streaming(
        owner, project, tiny_model, inference_worker, client_for):
    api = client_for(project_token(owner, project))
    assert [m.id for m in api.models.list().data] == [api_id(tiny_model)]

    messages = [{"role": "user", "content": "what is the capital of france ?"}]
    whole = api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=6, temperature=0)
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0

    chunks = list(api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=6,
                                              temperature=0, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == whole.choices[0].message.content  # greedy: the same answer, streamed
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    # The precision the worker loaded the model in, as OpenAI's system_fingerprint; streamed on the last chunk.
    precision = Generation.objects.get(pk=int(whole.id.split("-")[1])).precision
    assert precision in ("fp32", "bf16", "int8") and whole.system_fingerprint == f"workbench-{precision}"
    assert chunks[-1].system_fingerprint == whole.system_fingerprint and chunks[0].system_fingerprint is None

    completion = api.completions.create(model=tiny_model.name, prompt="what is paris ?", max_tokens=4)
    assert completion.choices[0].text is not None and completion.usage.completion_tokens > 0
    assert Generation.objects.filter(source="api", state="succeeded").count() == 3


def register_adapter(base, owner, *, seed: int, target_modules: list[str]):
    """A LoRA adapter over `base` with random, non-zero weights (it answers differently), registered
    READY as a fine-tune would register it."""
    import uuid

    import torch
    from django.conf import settings
    from peft import LoraConfig, get_peft_model

    from apps.registry.models import RegisteredModel
    from workers.models import load_for_inference

    torch.manual_seed(seed)
    model, _ = load_for_inference(base.weights_path)
    tuned = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, target_modules=target_modules,
                                             init_lora_weights=False))
    directory = settings.ARTIFACT_ROOT / "adapters" / f"lora-{uuid.uuid4().hex[:8]}"
    tuned.save_pretrained(directory)
    return RegisteredModel.objects.create(
        project=base.project, name=f"{base.name} tuned {seed}", format=RegisteredModel.Format.PEFT,
        kind=RegisteredModel.Kind.ADAPTER, base_model=base, source_path=str(directory), weights_path=str(directory),
        status=RegisteredModel.Status.READY, info=base.info, created_by=owner)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_concurrent_requests_for_two_adapters_and_their_base_each_get_their_own_answer(
        owner, project, tiny_model, inference_worker, client_for):
    """Through the real server and inference worker, which serves the adapters beside one copy of
    the base, rows of each adapter (and of none) in the same running batch: every answer is, token
    for token, the one its model gives alone (the adapter loaded the ordinary way, on a base of
    its own, in this process)."""
    from concurrent.futures import ThreadPoolExecutor

    from peft import PeftModel

    from workers.inference import SamplingParams, generate_batch, render_prompt
    from workers.models import load_for_inference

    adapters = [register_adapter(tiny_model, owner, seed=1, target_modules=["q_proj", "v_proj"]),
                register_adapter(tiny_model, owner, seed=2, target_modules=["q_proj", "k_proj", "o_proj"])]
    api = client_for(project_token(owner, project))
    questions = ["what is the capital of france ?", "what is paris ?", "paris is the capital of what ?"]
    asked = [(model, q) for q in questions for model in (tiny_model, *adapters)]

    def answer(item):
        model, question = item
        reply = api.chat.completions.create(model=model.name, messages=[{"role": "user", "content": question}],
                                            max_tokens=12, temperature=0)
        return reply.choices[0].message.content

    with ThreadPoolExecutor(len(asked)) as pool:  # all at once: the worker batches them together
        answers = list(pool.map(answer, asked))

    def alone(model, question: str) -> str:
        net, tokenizer = load_for_inference(tiny_model.weights_path)
        if model.kind == "adapter":
            net = PeftModel.from_pretrained(net, model.weights_path).eval()
        prompt = render_prompt(tokenizer, messages=[{"role": "user", "content": question}])
        return generate_batch(net, tokenizer, [prompt], SamplingParams(max_new_tokens=12))[0].text

    assert answers == [alone(model, question) for model, question in asked]
    per_model = {tuple(answers[i::3]) for i in range(3)}
    assert len(per_model) == 3  # the three models answer differently
    assert Generation.objects.filter(source="api", state="succeeded").count() == len(asked)


def test_bad_requests_get_a_clear_4xx_naming_the_parameter(owner, project, tiny_model, inference_worker, client_for,
                                                         live_asgi):
    raw = project_token(owner, project)
    api = client_for(raw)
    messages = [{"role": "user", "content": "what is paris ?"}]
    with pytest.raises(openai.BadRequestError) as absurd:
        api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=10**9)
    assert absurd.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as too_long:  # 256-token context
        api.chat.completions.create(model=tiny_model.name, messages=[{"role": "user", "content": "paris " * 300}],
                                    max_tokens=4)
    assert too_long.value.body["param"] == "messages" and too_long.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as too_long:
        api.completions.create(model=tiny_model.name, prompt="paris " * 300, max_tokens=4)
    assert too_long.value.body["param"] == "prompt" and too_long.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as absurd:
        api.chat.completions.create(model=tiny_model.name, messages=messages, max_completion_tokens=0)
    assert absurd.value.body["param"] == "max_completion_tokens"
    with pytest.raises(openai.BadRequestError) as malformed:
        api.chat.completions.create(model=tiny_model.name, messages=[{"role": "wizard", "content": 1}])
    assert malformed.value.body["param"].startswith("messages[0]")
    with pytest.raises(openai.NotFoundError) as unknown:
        api.chat.completions.create(model="gpt-4o", messages=messages)
    assert unknown.value.code == "model_not_found" and unknown.value.body["param"] == "model"
    refused = {  # each: (extra arguments, the param the 400 names)
        "tools": ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
        "tool_choice": ({"tool_choice": "required"}, "tool_choice"),
        "json schema without one": ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
                                    "response_format"),
        "uncompilable schema": ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "objekt"}}}}, "response_format"),
        "bad format": ({"response_format": "json"}, "response_format"),
        # the tiny model's word-level tokenizer is one the grammar engine cannot read: said, not ignored
        "json mode, tiny tokenizer": ({"response_format": {"type": "json_object"}, "max_tokens": 4}, "response_format"),
        "unknown format": ({"response_format": {"type": "yaml"}}, "response_format"),
        "n=0": ({"n": 0}, "n"),
        "n=9": ({"n": 9}, "n"),
        "usage without stream": ({"stream_options": {"include_usage": True}}, "stream_options"),
        "top without logprobs": ({"top_logprobs": 2}, "top_logprobs"),
        "too many top": ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        "penalty": ({"presence_penalty": 3}, "presence_penalty"),
        "penalty type": ({"frequency_penalty": "high"}, "frequency_penalty"),
        "logit bias": ({"logit_bias": {"5": 10}}, "logit_bias"),
        "image part": ({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}, "messages[0].content[0]"),
        "text part": ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
                      "messages[0].content[0].text"),
        "nul in text": ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a\x00b"}]}]},
                        "messages[0].content[0].text"),
        "nul in model": ({"model": "tiny\x00"}, "model"),
    }
    for case, (extra, param) in refused.items():
        with pytest.raises(openai.BadRequestError) as caught:
            api.chat.completions.create(**{"model": tiny_model.name, "messages": messages, **extra})
        assert caught.value.body["param"] == param, case
        assert caught.value.body["message"], case
    with pytest.raises(openai.BadRequestError) as caught:
        api.completions.create(model=tiny_model.name, prompt="paris", logprobs=6)
    assert caught.value.body["param"] == "logprobs"
    response = requests.post(f"{live_asgi}/v1/chat/completions", data=b"{not json",
                             headers={"Authorization": f"Bearer {raw}"}, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["param"] == "body"
    assert not Generation.objects.filter(state="succeeded").exists()


def test_tokens_are_required_scoped_and_permission_checked(owner, project, other_project, outsider, tiny_model,
                                                           client_for):
    with pytest.raises(openai.AuthenticationError):
        client_for("wb_nope_nope").models.list()
    # Another project's token sees none of this project's models.
    assert client_for(project_token(outsider, other_project)).models.list().data == []
    with pytest.raises(openai.NotFoundError):
        client_for(project_token(outsider, other_project)).chat.completions.create(
            model=tiny_model.name, messages=[{"role": "user", "content": "hi"}])
    # A token without model.generate may list models but not generate.
    read_only = client_for(project_token(owner, project, ("project.view", "model.view")))
    assert [m.id for m in read_only.models.list().data] == [api_id(tiny_model)]
    with pytest.raises(openai.PermissionDeniedError):
        read_only.chat.completions.create(model=tiny_model.name, messages=[{"role": "user", "content": "hi"}])
    assert not Generation.objects.exists()


def test_the_token_rate_limit_answers_429_with_retry_after(owner, project, tiny_model, live_asgi, settings,
                                                           monkeypatch):
    from rest_framework.settings import api_settings

    from apps.accounts.throttling import TokenRateThrottle

    raw = project_token(owner, project)
    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "token": "3/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    # The class read its rates once: set for this test only (a rate left behind throttled later tests).
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", rates)
    codes = [requests.get(f"{live_asgi}/v1/models", headers={"Authorization": f"Bearer {raw}"}, timeout=10)
             for _ in range(4)]
    assert [r.status_code for r in codes] == [200, 200, 200, 429]
    assert int(codes[-1].headers["Retry-After"]) > 0
    assert codes[-1].json()["error"]["code"] == "rate_limit_exceeded"


def test_every_v1_answer_is_json_in_openais_error_shape(owner, project, tiny_model, live_asgi, client_for):
    raw = project_token(owner, project)
    auth = {"Authorization": f"Bearer {raw}"}
    for method, path, status in [("GET", "/v1/embeddings", 404), ("GET", "/v1", 404), ("GET", "/v1/models/", 404),
                                 ("GET", "/v1/chat/completions", 405), ("POST", "/v1/models", 405),
                                 ("DELETE", f"/v1/models/{api_id(tiny_model)}", 405)]:
        response = requests.request(method, f"{live_asgi}{path}", headers=auth, timeout=10)
        assert response.status_code == status, path
        assert response.headers["Content-Type"] == "application/json", path
        assert response.json()["error"]["message"] and response.json()["error"]["type"], path
    assert requests.get(f"{live_asgi}/v1/embeddings", headers=auth, timeout=10).json()["error"]["code"] == "unknown_url"

    for headers in ({}, {"Authorization": "Bearer wb_nope_nope"}):
        response = requests.get(f"{live_asgi}/v1/models", headers=headers, timeout=10)
        assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError) as caught:
        client_for("wb_nope_nope").models.list()
    assert caught.value.code == "invalid_api_key"

    huge = b"x" * (settings.MAX_REQUEST_BODY_BYTES + 1)  # refused before Django reads it
    response = requests.post(f"{live_asgi}/v1/chat/completions", data=huge, timeout=30,
                             headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 413 and "limit is" in response.json()["error"]["message"]
    big = json.dumps({"model": tiny_model.name, "messages": [{"role": "user", "content": "paris " * 10**6}]})
    response = requests.post(f"{live_asgi}/v1/chat/completions", data=big, timeout=30,
                             headers={**auth, "Content-Type": "application/json"})  # within it, over Django's
    assert response.status_code == 413 and response.json()["error"]["param"] == "body"
    assert not Generation.objects.exists()


def test_model_ids_are_slugs_and_one_model_can_be_fetched(owner, project, tiny_model, client_for):
    from apps.registry.models import RegisteredModel

    api = client_for(project_token(owner, project))
    slug = api_id(tiny_model)
    assert " " not in slug
    [listed] = api.models.list().data
    assert (listed.id, listed.owned_by, listed.model_extra["name"]) == (slug, project.name, tiny_model.name)
    for ref in (slug, slug.upper(), tiny_model.name, str(tiny_model.pk)):  # the display name still resolves
        assert api.models.retrieve(ref).id == slug
    with pytest.raises(openai.NotFoundError) as caught:
        api.models.retrieve("gpt-4o")
    assert caught.value.code == "model_not_found"
    # Two names with the same slug: each id says which model it is.
    twin = RegisteredModel.objects.create(
        project=project, name=tiny_model.name.replace("-", " "), format=tiny_model.format, kind=tiny_model.kind,
        source_path=tiny_model.source_path, weights_path=tiny_model.weights_path, status="ready", info=tiny_model.info)
    ids = [m.id for m in api.models.list().data]
    assert sorted(ids) == sorted([f"{slug}-{tiny_model.pk}", f"{slug}-{twin.pk}"])
    assert api.models.retrieve(f"{slug}-{twin.pk}").model_extra["name"] == twin.name


def test_the_official_clients_options_n_logprobs_penalties_text_parts_developer_role_and_usage(
        owner, project, tiny_model, inference_worker, client_for):
    """Each option through the real server and worker, checked against what the engine gives for
    the same request in this process."""
    from workers.inference import SamplingParams, generate_batch, render_prompt
    from workers.models import load_for_inference

    api = client_for(project_token(owner, project))
    question = "what is the capital of france ?"
    plain = [{"role": "system", "content": "paris is the capital"}, {"role": "user", "content": question}]
    parts = [{"role": "developer", "content": [{"type": "text", "text": "paris is"}, {"type": "text",
                                                                                     "text": "the capital"}]},
             {"role": "user", "content": [{"type": "text", "text": question}]}]
    net, tokenizer = load_for_inference(tiny_model.weights_path)

    def alone(messages, **params) -> object:
        prompt = render_prompt(tokenizer, messages=messages)
        return generate_batch(net, tokenizer, [prompt], SamplingParams(max_new_tokens=10, **params))[0]

    # content parts are joined by newlines, developer is the system role
    expected = alone([{"role": "system", "content": "paris is\nthe capital"}, plain[1]])
    reply = api.chat.completions.create(model=api_id(tiny_model), messages=parts, max_tokens=10, temperature=0,
                                        n=2, logprobs=True, top_logprobs=2)
    assert [c.index for c in reply.choices] == [0, 1]
    assert [c.message.content for c in reply.choices] == [expected.text] * 2  # greedy: the same twice
    assert reply.usage.completion_tokens == 2 * expected.completion_tokens
    assert reply.usage.prompt_tokens == expected.prompt_tokens
    for choice in reply.choices:
        tokens = [t.token for t in choice.logprobs.content]
        assert tokens == [tokenizer.decode([t]) for t in expected.token_ids if t not in (tokenizer.eos_token_id,)]
        assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token and t.logprob <= 0
                   for t in choice.logprobs.content)

    penalized = api.chat.completions.create(model=tiny_model.name, messages=plain, max_tokens=10, temperature=0,
                                            frequency_penalty=2.0, presence_penalty=0.5)
    assert penalized.choices[0].message.content == alone(plain, frequency_penalty=2.0, presence_penalty=0.5).text
    assert penalized.choices[0].logprobs is None

    chunks = list(api.chat.completions.create(model=tiny_model.name, messages=plain, max_tokens=10, temperature=0,
                                              n=2, stream=True, stream_options={"include_usage": True},
                                              logprobs=True))
    *body, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == 2 * alone(plain).completion_tokens
    assert all(c.usage is None for c in body)
    for index in (0, 1):
        mine = [c.choices[0] for c in body if c.choices[0].index == index]
        assert "".join(c.delta.content or "" for c in mine) == alone(plain).text
        assert mine[-1].finish_reason in ("stop", "length")
        streamed = [t.token for c in mine if c.logprobs for t in c.logprobs.content]
        assert streamed == [tokenizer.decode([t]) for t in alone(plain).token_ids if t != tokenizer.eos_token_id]

    completion = api.completions.create(model=tiny_model.name, prompt=question, max_tokens=6, logprobs=3, n=2,
                                        seed=5, temperature=1.0)
    expected = [generate_batch(net, tokenizer, [question],
                               SamplingParams(max_new_tokens=6, temperature=1.0, seed=seed))[0] for seed in (5, 6)]
    assert [c.text for c in completion.choices] == [e.text for e in expected]  # choice i samples with seed + i
    first = completion.choices[0].logprobs
    assert len(first.tokens) == len(first.token_logprobs) == len(first.top_logprobs) == len(first.text_offset)
    assert all(len(top) <= 3 for top in first.top_logprobs) and first.text_offset[0] == 0
    assert Generation.objects.filter(source="api", state="succeeded").count() == 2 + 1 + 2 + 2


PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150}}}


@pytest.mark.timeout(400)
def test_response_format_json_object_and_json_schema_give_json_that_parses_streamed_or_not(
        owner, project, demo_model, inference_worker, client_for):
    import jsonschema

    api = client_for(project_token(owner, project))
    messages = [{"role": "user", "content": "Describe a French engineer called Marie."}]
    plain = api.chat.completions.create(model=api_id(demo_model), messages=messages, max_tokens=48, temperature=0)
    with pytest.raises(ValueError):  # the model alone writes prose: the constraint is what makes JSON of it
        jsonschema.validate(json.loads(plain.choices[0].message.content), PERSON)
    shaped = api.chat.completions.create(
        model=api_id(demo_model), messages=messages, max_tokens=96, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    assert shaped.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(shaped.choices[0].message.content), PERSON)
    chunks = api.chat.completions.create(
        model=api_id(demo_model), messages=messages, max_tokens=96, temperature=0, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == \
        shaped.choices[0].message.content
    # JSON mode: any object; as with OpenAI, an answer cut at max_tokens ("length") is an object's start
    anything = api.chat.completions.create(model=api_id(demo_model), messages=messages, max_tokens=64,
                                           temperature=0, response_format={"type": "json_object"})
    text, reason = anything.choices[0].message.content, anything.choices[0].finish_reason
    assert isinstance(json.loads(text), dict) if reason == "stop" else (reason == "length" and text.startswith("{"))
    stored = Generation.objects.filter(state="succeeded").order_by("-id").first()
    assert stored.params["json_schema"] == {"type": "object"}
