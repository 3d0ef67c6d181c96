"""The demo model end to end: registered from its GGUF (converted once by the worker), then
asked through the OpenAI-compatible API with the official client. Slow: about a minute."""

from datetime import timedelta

import openai
import pytest
from django.utils import timezone

from apps.accounts import services as account_services
from apps.registry.models import RegisteredModel
from apps.registry.services import model_register
from tests.conftest import wait_for
from workers.models import demo_model_gguf

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_demo_model_answers_the_capital_of_france_with_paris(owner, project, celery_worker, inference_worker,
                                                                 live_asgi):
    gguf = demo_model_gguf()
    model = model_register(user=owner, project=project, name="SmolLM2", path=str(gguf))
    wait_for(lambda: RegisteredModel.objects.get(pk=model.pk).status not in ("checking", "converting"), timeout=240,
             what="the GGUF conversion")
    assert RegisteredModel.objects.get(pk=model.pk).status == "ready"
    _, raw = account_services.token_create(user=owner, name="api", project=project,
                                           permissions=["project.view", "model.view", "model.generate"],
                                           expires_at=timezone.now() + timedelta(hours=1))
    api = openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=raw, max_retries=0, timeout=240)
    answer = api.chat.completions.create(model="SmolLM2", temperature=0, max_tokens=24, messages=[
        {"role": "user", "content": "What is the capital of France?"}])
    assert "Paris" in answer.choices[0].message.content
