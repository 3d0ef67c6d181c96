"""A generation's text stays on its row only for SERVING_TEXT_RETENTION_S after it ends: the beat task
blanks prompt, messages, output and logprobs of older ones and leaves what the serving metrics read
(state, timings, token counts). Production text is kept only where an alias's request logging asks."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.registry.services import alias_set
from apps.serving.models import Capture, Generation
from apps.serving.selectors import serving_metrics
from apps.serving.tasks import generations_scrub_task

pytestmark = pytest.mark.django_db


def generation(project, model, *, ended_ago_s: float | None, **fields) -> Generation:
    fields = {"messages": [{"role": "user", "content": "my secret"}], **fields}
    row = Generation.objects.create(
        project=project, model=model, source="api", params={}, output="the answer", logprobs=[{"token": "the", "logprob": -0.1}], prompt_tokens=5, completion_tokens=2,
        time_to_first_token_s=0.05, total_s=0.2,
        state="succeeded" if ended_ago_s is not None else "running", **fields)
    if ended_ago_s is not None:
        Generation.objects.filter(pk=row.pk).update(finished_at=timezone.now() - timedelta(seconds=ended_ago_s))
    return row


def test_text_of_generations_ended_past_the_retention_is_blanked_and_their_figures_stay(
        project, tiny_model, settings):
    settings.SERVING_TEXT_RETENTION_S = 600
    old = generation(project, tiny_model, ended_ago_s=601)
    completion = generation(project, tiny_model, ended_ago_s=3600, messages=None, prompt="complete my secret")
    recent = generation(project, tiny_model, ended_ago_s=599)
    running = generation(project, tiny_model, ended_ago_s=None)
    Generation.objects.filter(pk=running.pk).update(created_at=timezone.now() - timedelta(hours=1))
    before = serving_metrics(tiny_model)

    assert generations_scrub_task() == 2
    for row in (old, completion):
        row.refresh_from_db()
        assert (row.messages, row.prompt, row.output, row.logprobs) == (None, None, "", None)
        assert (row.prompt_tokens, row.completion_tokens, row.total_s, row.state) == (5, 2, 0.2, "succeeded")
    for row in (recent, running):
        row.refresh_from_db()
        assert row.messages == [{"role": "user", "content": "my secret"}] and row.output == "the answer"
    assert serving_metrics(tiny_model)["lines"] == before["lines"]  # the figures read only what stays
    assert generations_scrub_task() == 0  # nothing left to blank: scrubbed rows are not written again


def test_a_capture_keeps_its_own_copy_after_the_generation_is_scrubbed(owner, project, tiny_model, settings):
    settings.SERVING_TEXT_RETENTION_S = 0
    alias = alias_set(user=owner, model=tiny_model, name="production", version=tiny_model.pk)
    row = generation(project, tiny_model, ended_ago_s=5)
    capture = Capture.objects.create(project=project, alias=alias, version=tiny_model, generation=row,
                                     completion_id="chatcmpl-1",
                                     messages=[{"role": "user", "content": "[EMAIL]"}], response="the answer")
    assert generations_scrub_task() == 1
    capture.refresh_from_db()
    assert capture.response == "the answer" and capture.messages == [{"role": "user", "content": "[EMAIL]"}]
