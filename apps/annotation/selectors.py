"""What the API and pages show of items and annotations."""

from __future__ import annotations

from django.db.models import Prefetch

from apps.annotation import quality, queue
from apps.annotation.field_types import candidate_keys, field_type, plain_words, row_value
from apps.annotation.models import Annotation, Campaign, Item, Lease
from apps.annotation.services import annotation_payload, row_dict
from apps.core.rendering import render_markdown


def version_labels(version) -> list[str]:
    """A dataset version's label values, the most frequent first (the top ones its stats keep,
    counted when it was written: no pass over its rows)."""
    return list((version.stats or {}).get("labels", {}))


def example_payload(item: Item, fields: list[dict]) -> dict:
    """The example as the annotator sees it: raw text (for spans and diffs) and safe HTML."""
    row = item.row
    data = row_dict(row)
    data["html"] = {
        "prompt": render_markdown(row.prompt) if row.prompt is not None else None,
        "response": render_markdown(row.response) if row.response is not None else None,
        "reference": render_markdown(row.reference) if row.reference is not None else None,
        "messages": [{"role": m.get("role"), "html": render_markdown(m.get("content"))} for m in row.messages or []],
    }
    candidates = {}
    for field in fields:
        paths = field_type(field).candidate_paths(field)
        if paths:
            texts = [row_value(data, path) for path in paths]
            candidates[field["name"]] = [
                {"key": key, "text": text, "html": render_markdown(text) if isinstance(text, str) else None}
                for key, text in zip(candidate_keys(len(texts)), texts, strict=True)]
    data["candidates"] = candidates
    return data


def item_payload(item: Item, user, *, fresh: bool = False) -> dict:
    """An item for its annotator, with their draft and, unless `fresh` (just handed out by the
    queue: never answered by them, leased until `item.lease_expires_at`), their answer and lease."""
    campaign = item.campaign
    draft = queue.draft(item.pk, user.pk)
    if fresh:
        mine, expires = None, item.lease_expires_at
    else:
        mine = Annotation.objects.filter(item=item, annotator=user).select_related("annotator", "schema").first()
        lease = Lease.objects.filter(item=item, annotator=user).first()
        expires = lease.expires_at if lease else None
    return {
        "id": item.pk, "position": item.position, "example": example_payload(item, campaign.schema.fields),
        "suggestion": item.suggestion,
        "draft": {"values": draft.values, "comment": draft.comment, "updated_at": draft.updated_at.isoformat()}
        if draft else None,
        "annotation": annotation_payload(mine) if mine else None,
        "lease_expires_at": expires.isoformat() if expires else None,
    }


def answer_in_words(fields: list[dict], values: dict, example: dict) -> dict[str, str]:
    """An answer as a reviewer reads it, field by field: lists joined, a ranking best first, a
    preference in words, each span with the text it marks (offsets in code points, as stored)."""
    by_name = {field["name"]: field for field in fields}
    return {name: field_type(by_name[name]).in_words(by_name[name], value, example) if name in by_name
            else plain_words(value) for name, value in values.items()}


def _answers():
    return Annotation.objects.filter(skipped=False).select_related("annotator", "schema").order_by("created_at")


def reviewable_items(campaign: Campaign, *, disagreements: bool = False):
    """The campaign's answered items in order, each with its answers (one query for all of them),
    for `review_payload`; only those whose annotators disagree if `disagreements`."""
    items = (Item.objects.filter(campaign=campaign, completed__gt=0)
             .select_related("row", "campaign__schema", "adjudicated_by").order_by("position")
             .prefetch_related(Prefetch("annotations", queryset=_answers(), to_attr="answers")))
    if disagreements:
        items = items.filter(pk__in=quality.disagreement_item_ids(campaign))
    return items


def review_payload(item: Item) -> dict:
    annotations = item.answers if hasattr(item, "answers") else _answers().filter(item=item)
    example = example_payload(item, item.campaign.schema.fields)
    return {
        "id": item.pk, "position": item.position, "example": example,
        "is_gold": item.is_gold, "gold_values": item.gold_values, "suggestion": item.suggestion,
        "adjudicated_values": item.adjudicated_values,
        "adjudicated_by": item.adjudicated_by.username if item.adjudicated_by else None,
        "annotations": [{**annotation_payload(a), "in_words": answer_in_words(a.schema.fields, a.values, example),
                         "reviewed_in_words": answer_in_words(a.schema.fields, a.reviewed_values or {}, example)}
                        for a in annotations],
    }


def my_annotations(campaign: Campaign, user):
    return (Annotation.objects.filter(item__campaign=campaign, annotator=user)
            .select_related("annotator", "schema").order_by("-created_at", "-id"))


def annotation_filter(user, version, value: str):
    """For browsing a dataset version by annotation status: `value` is "<campaign id>:done" or
    "<campaign id>:todo" for a campaign over this version the person may see. Returns the
    campaigns to offer and the (row ids, keep?) filter, or None when `value` names none."""
    from apps.annotation.services import visible_campaigns

    campaigns = list(visible_campaigns(user, version.dataset.project).filter(dataset_version=version))
    campaign_id, _, status = (value or "").partition(":")
    chosen = next((c for c in campaigns if str(c.pk) == campaign_id), None)
    if chosen is None or status not in ("done", "todo"):
        return campaigns, None
    done = Item.objects.filter(campaign=chosen, completed__gte=chosen.overlap).values("row_id")
    return campaigns, (done, status == "done")
