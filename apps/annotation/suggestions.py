"""Model suggestions for a campaign, made in an `inference` worker through the shared batcher.

For each item the campaign's model writes a response (pre-filling the fields whose type fills
from it: text fields whose prefill is "suggestion") and answers each field's type's question
(a single_label field: name one label; a reply that names no label gives no suggestion rather
than a guess). A classifier adapter instead scores the items' text in batches (the engine of the
classify endpoint): its most probable class fills the single-label fields whose labels are its
classes (a multi-label classifier: its classes above one half fill the multi-label fields), and
the suggestion keeps the class probabilities and the classifier's `confidence` (the top probability;
multi-label: that of its least sure class; also on the item, which the queue orders by when the
campaign asks for the least confident first). Suggestions are
stored on the item; the
annotator's answer and the suggestion are both kept on the annotation. Stopping the
suggestions, or closing the campaign, ends the job between chunks. The run is a SuggestionRun
under the jobs lease: a worker lost mid-way is taken over, and the new one goes on with the items
that have no suggestion yet.
"""

import logging

from django.conf import settings

from apps.annotation import events
from apps.annotation.field_types import field_type
from apps.annotation.models import Campaign, Item, SuggestionRun
from apps.annotation.services import classifier_fields
from apps.core.jobs import JobCancelled, JobRun
from apps.registry.weights import model_paths
from apps.serving.runner import batcher, engine_key
from apps.serving.services import is_classifier

logger = logging.getLogger(__name__)
CHUNK = 32
MAX_NEW_TOKENS = 128  # a draft to correct, kept short so suggestions keep ahead of annotators


def _messages(row, question: str | None = None) -> list[dict]:
    messages = [m for m in (row.messages or []) if m.get("role") != "assistant"] or [
        {"role": "user", "content": row.prompt or ""}]
    if question:
        messages = [*messages[:-1], {"role": "user", "content": f"{messages[-1]['content']}\n\n{question}"}]
    return messages


def run_suggestions(campaign_id: int, *, worker: str = "") -> None:
    run = JobRun.claim(SuggestionRun, campaign_id, worker=worker, what="suggestion run", every_s=0,
                       publish=lambda job, **details: events.campaign_changed(campaign_id))  # open dashboards show it
    if run is None:
        return  # ended, stopped, gone, or running under a live worker (a redelivered message)
    with run:
        _suggest(run, campaign_id)


def _item_text(row) -> str:
    """What a classifier reads of an example: its prompt, else its last user message."""
    if row.prompt:
        return row.prompt
    said = [m.get("content") for m in row.messages or [] if m.get("role") == "user"]
    return said[-1] if said and isinstance(said[-1], str) else ""


def _pending(campaign: Campaign):
    """The items without a suggestion yet, and how many have one (taken over from a lost worker:
    the items it finished count as done)."""
    items = Item.objects.filter(campaign=campaign, suggestion__isnull=True).select_related("row").order_by("position")
    return items, Item.objects.filter(campaign=campaign, suggestion__isnull=False).count()


def _suggest(run: JobRun, campaign_id: int) -> None:
    campaign = Campaign.objects.select_related("suggestion_model__base_model", "schema").get(pk=campaign_id)
    suggest = _classify if is_classifier(campaign.suggestion_model) else _generate
    try:
        suggest(run, campaign)
    except JobCancelled:
        run.cancel()
    except Exception as exc:  # a model that cannot load: the campaign page says why
        logger.exception("suggestions for campaign %s failed", campaign_id)
        run.fail(f"{type(exc).__name__}: {exc}"[:2000])
    else:
        run.finish()


def _classify(run: JobRun, campaign: Campaign) -> None:
    from apps.serving.classify import classify_with

    model = campaign.suggestion_model
    fields = {f["name"]: f for f in campaign.schema.fields}
    filled = classifier_fields(model, campaign.schema.fields)  # the form may have changed since
    items, done = _pending(campaign)
    total = done + items.count()
    run.progress(done, total)  # before each chunk: stopped by a manager or by closing the campaign?
    while chunk := list(items[:CHUNK]):
        texts = {item.pk: text for item in chunk if (text := _item_text(item.row))}
        results = dict(zip(texts, classify_with(model, list(texts.values())), strict=True)) if texts else {}
        for item in chunk:
            suggestion, confidence = {"model": model.pk, "values": {}}, None  # no text: nothing to suggest
            if (result := results.get(item.pk)) is not None:
                probabilities, confidence = result["probabilities"], result["confidence"]
                suggestion = {"model": model.pk, "probabilities": probabilities, "confidence": confidence,
                              "values": {name: field_type(fields[name]).suggestion_from_classes(fields[name],
                                                                                                probabilities)
                                         for name in filled}}
            Item.objects.filter(pk=item.pk).update(suggestion=suggestion, confidence=confidence)
        done += len(chunk)
        run.progress(done, total)


def _generate(run: JobRun, campaign: Campaign) -> None:
    from workers.inference import SamplingParams

    fields = campaign.schema.fields
    wants_text = [f["name"] for f in fields if field_type(f).fills_from_model_response(f)]
    asked = {f["name"]: (f, question) for f in fields if (question := field_type(f).suggestion_question(f))}
    base, adapter = model_paths(campaign.suggestion_model)  # from the artifact bucket on another machine
    key = engine_key(campaign.suggestion_model, adapter)
    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS)
    question_params = SamplingParams(max_new_tokens=16)  # a label's name, not an essay
    items, done = _pending(campaign)
    total = done + items.count()
    # Before each chunk: stopped by a manager or by closing the campaign (SuggestionRun.cancel_asked)?
    run.progress(done, total)
    while chunk := list(items[:CHUNK]):
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
        run.progress(done, total)
