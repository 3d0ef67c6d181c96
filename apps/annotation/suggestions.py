"""Model suggestions for a campaign, made in an `inference` worker through the shared batcher.

For each item the campaign's model writes a response (pre-filling the fields whose type fills
from it: text fields whose prefill is "suggestion") and answers each field's type's question
(a single_label field: name one label; a reply that names no label gives no suggestion rather
than a guess). Suggestions are stored on the item; the
annotator's answer and the suggestion are both kept on the annotation. Stopping the
suggestions, or closing the campaign, ends the job between chunks.
"""

import logging

from django.conf import settings
from django.db.models import Q

from apps.annotation import events
from apps.annotation.field_types import field_type
from apps.annotation.models import Campaign, Item
from apps.serving.runner import batcher, model_paths

logger = logging.getLogger(__name__)
CHUNK = 32
MAX_NEW_TOKENS = 128  # a draft to correct, kept short so suggestions keep ahead of annotators


def _messages(row, question: str | None = None) -> list[dict]:
    messages = [m for m in (row.messages or []) if m.get("role") != "assistant"] or [
        {"role": "user", "content": row.prompt or ""}]
    if question:
        messages = [*messages[:-1], {"role": "user", "content": f"{messages[-1]['content']}\n\n{question}"}]
    return messages


def run_suggestions(campaign_id: int) -> None:
    from workers.inference import SamplingParams

    claimed = Campaign.objects.filter(pk=campaign_id, suggestion_state="queued").update(suggestion_state="running")
    if not claimed:
        return
    campaign = Campaign.objects.select_related("suggestion_model__base_model", "schema").get(pk=campaign_id)
    fields = campaign.schema.fields
    wants_text = [f["name"] for f in fields if field_type(f).fills_from_model_response(f)]
    asked = {f["name"]: (f, question) for f in fields if (question := field_type(f).suggestion_question(f))}
    base, adapter = model_paths(campaign.suggestion_model)
    key = f"model-{campaign.suggestion_model.base_model_id or campaign.suggestion_model_id}"
    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS)
    question_params = SamplingParams(max_new_tokens=16)  # a label's name, not an essay
    items = Item.objects.filter(campaign=campaign, suggestion__isnull=True).select_related("row").order_by("position")
    total, done = items.count(), 0
    try:
        while True:
            # Stopped by a manager (services.suggestions_stop) or by closing the campaign.
            if Campaign.objects.filter(Q(state=Campaign.State.CLOSED) | Q(suggestion_state="cancelled"),
                                       pk=campaign_id).exists():
                _state(campaign_id, "cancelled", done, total)
                return
            chunk = list(items[:CHUNK])
            if not chunk:
                break
            futures = []
            for item in chunk:
                jobs = {}
                if wants_text:
                    jobs["response"] = batcher().submit(key, base, None, params, messages=_messages(item.row),
                                                        adapter_path=adapter)
                for name, (_, question) in asked.items():
                    jobs[name] = batcher().submit(key, base, None, question_params,
                                                  messages=_messages(item.row, question), adapter_path=adapter)
                futures.append((item, jobs))
            for item, jobs in futures:
                values = {}
                for name, future in jobs.items():
                    text = future.result(timeout=settings.INFERENCE_TIMEOUT_S).text
                    if name == "response":
                        values.update({field: text for field in wants_text})
                    else:
                        field = asked[name][0]
                        if (answer := field_type(field).suggestion_from_reply(field, text)) is not None:
                            values[name] = answer
                Item.objects.filter(pk=item.pk).update(
                    suggestion={"model": campaign.suggestion_model_id, "values": values})
                done += 1
            _state(campaign_id, "running", done, total)
    except Exception as exc:  # a model that cannot load: the campaign page says why
        logger.exception("suggestions for campaign %s failed", campaign_id)
        _state(campaign_id, "failed", done, total, error=f"{type(exc).__name__}: {exc}"[:2000])
        return
    _state(campaign_id, "succeeded", done, total)


def _state(campaign_id: int, state: str, done: int, total: int, error: str = "") -> None:
    progress = {"done": done, "total": total}
    if error:
        progress["error"] = error
    campaign = Campaign.objects.filter(pk=campaign_id)
    if state == "running":  # progress only: a stop asked meanwhile must stand
        campaign = campaign.filter(suggestion_state="running")
    campaign.update(suggestion_state=state, suggestion_progress=progress)
    events.campaign_changed(campaign_id)  # open dashboards show it
