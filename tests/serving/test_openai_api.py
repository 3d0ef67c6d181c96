"""The OpenAI-compatible API through the whole stack: the official `openai` client against the
live ASGI server, a real `inference` worker (threads, one model cache) generating with the
tiny model, tokens streamed back over the channel layer."""

from datetime import timedelta

import openai
import pytest
import requests
from django.utils import timezone

from apps.accounts import services as account_services
from apps.serving.models import Generation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


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
    assert [m.id for m in api.models.list().data] == [tiny_model.name]

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
    assert too_long.value.body["param"] in ("prompt", "messages")
    with pytest.raises(openai.BadRequestError) as malformed:
        api.chat.completions.create(model=tiny_model.name, messages=[{"role": "wizard", "content": 1}])
    assert malformed.value.body["param"].startswith("messages[0]")
    with pytest.raises(openai.NotFoundError):
        api.chat.completions.create(model="gpt-4o", messages=messages)
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
    assert [m.id for m in read_only.models.list().data] == [tiny_model.name]
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
