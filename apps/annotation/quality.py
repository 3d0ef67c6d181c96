"""A campaign's numbers: agreement per field, per-annotator throughput and quality, the
disagreements queue, and the resolved answer of each example (used by the exporter)."""


import statistics
from collections import defaultdict
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.db.models import Count, Max
from django.db.models.fields.json import KeyTextTransform

from apps.annotation import agreement, events
from apps.annotation.field_types import field_type
from apps.annotation.models import Annotation, Campaign, Item
from apps.core.memo import memoized, memoized_by_worker


def hashable(value):
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, hashable(v)) for k, v in value.items()))
    return value


def answers_by_item(campaign: Campaign):
    """{item id: [annotation, ...]} of submitted (not skipped) answers, oldest first."""
    grouped = defaultdict(list)
    for annotation in (Annotation.objects.filter(item__campaign=campaign, skipped=False)
                       .select_related("annotator").order_by("created_at", "id")):
        grouped[annotation.item_id].append(annotation)
    return grouped


class Answer(NamedTuple):
    """What the numbers read of a submitted answer: a plain row, not a model instance (making
    15,000 of those was most of the dashboard's time, holding the GIL)."""

    annotator: str  # the username
    values: dict
    time_spent_ms: int | None
    created_at: datetime


def answer_rows(campaign: Campaign) -> dict[int, list[Answer]]:
    """{item id: [Answer, ...]} of submitted (not skipped) answers, oldest first."""
    grouped = defaultdict(list)
    rows = (Annotation.objects.filter(item__campaign=campaign, skipped=False).order_by("created_at", "id")
            .values_list("item_id", "annotator__username", "values", "time_spent_ms", "created_at"))
    for item_id, *answer in rows:
        grouped[item_id].append(Answer(*answer))
    return grouped


def field_units(fields: list[dict], grouped: dict[int, list[Answer]]) -> dict[str, dict]:
    """{field name: {item id: {annotator: value}}} for the fields agreement is measured on."""
    units = {f["name"]: {} for f in fields if field_type(f).agreement_level}
    for item_id, annotations in grouped.items():
        for annotation in annotations:
            for name in units:
                if name in annotation.values:
                    units[name].setdefault(item_id, {})[annotation.annotator] = hashable(
                        annotation.values[name])
    return units


QUALITY_KIND = "campaign-quality"


def campaign_quality(campaign: Campaign) -> dict:
    """Agreement per field and the annotator table, with `answers` (how many they are computed
    over now) and `computing`. A pass over every answer, so it is memoized on what it is computed
    from (the answers' count, newest change and highest id, the form, the gold answers): every
    open dashboard, reload and API call shares one computation until an answer changes, at the
    cost of one aggregate query. Past QUALITY_INLINE_MAX_ANSWERS a worker computes it
    (`annotation.quality`); meanwhile the campaign's last numbers are shown, `computing` true
    (or empty tables when it has none yet), and its dashboards are told when the new ones are ready."""
    gold, inputs, answers = _quality_inputs(campaign)
    if answers <= settings.QUALITY_INLINE_MAX_ANSWERS:
        numbers = memoized(QUALITY_KIND, inputs, lambda: _campaign_quality(campaign, gold),
                           subject=_subject(campaign))
        return {**numbers, "answers": answers, "computing": False}
    latest = memoized_by_worker(QUALITY_KIND, _subject(campaign), inputs, task="annotation.quality",
                                args=[campaign.pk])
    return {**(latest.value or {"fields": [], "annotators": []}), "answers": answers, "computing": not latest.fresh}


def compute_campaign_quality(campaign_id: int) -> None:
    """The worker's side of `campaign_quality`: compute and keep the campaign's numbers for its
    answers as they are now, then have its open dashboards count again (and read them)."""
    campaign = Campaign.objects.select_related("schema").filter(pk=campaign_id).first()
    if campaign is None:
        return
    gold, inputs, _ = _quality_inputs(campaign)
    memoized(QUALITY_KIND, inputs, lambda: _campaign_quality(campaign, gold), subject=_subject(campaign))
    events.campaign_changed(campaign.pk)


def _quality_inputs(campaign: Campaign) -> tuple[dict, list, int]:
    """(gold answers by item, everything the numbers are computed from, how many answers)."""
    gold = {pk: values for pk, values in Item.objects.filter(campaign=campaign, is_gold=True)
            .order_by("pk").values_list("pk", "gold_values")}
    stamp = Annotation.objects.filter(item__campaign=campaign).aggregate(
        count=Count("pk"), newest=Max("updated_at"), top=Max("pk"))
    return gold, [campaign.pk, campaign.created_at, campaign.schema.fields, stamp, gold], stamp["count"]


def _subject(campaign: Campaign) -> str:
    # The creation time too: SQLite hands a deleted campaign's id out again.
    return f"{campaign.pk}@{campaign.created_at.isoformat()}"


def _campaign_quality(campaign: Campaign, gold: dict) -> dict:
    fields = campaign.schema.fields
    grouped = answer_rows(campaign)
    units = field_units(fields, grouped)
    per_field = []
    consensus_rates: dict = defaultdict(list)
    gold_scores: dict = defaultdict(lambda: {"correct": 0, "items": 0})
    for field in fields:
        kind = field_type(field).agreement_level
        if kind is None:
            continue
        field_units_ = units[field["name"]]
        domain = field_type(field).agreement_domain(field)
        pairs = agreement.pairwise_cohen(field_units_)
        per_field.append({
            "field": field["name"], "type": field["type"], "level": kind,
            "items_with_2_plus": sum(1 for a in field_units_.values() if len(a) >= 2),
            "fleiss_kappa": agreement.fleiss_kappa(field_units_) if kind == "nominal" else None,
            "krippendorff_alpha": agreement.krippendorff_alpha(field_units_, kind, domain),
            "cohen_kappa": [{"annotators": list(pair), **value} for pair, value in pairs.items()],
            "disagreements": len(agreement.disagreements(field_units_)),
        })
        for annotator, score in agreement.agreement_with_consensus(field_units_).items():
            consensus_rates[annotator].append(score["rate"])
        field_gold = {item: hashable(values[field["name"]]) for item, values in gold.items()
                      if values and field["name"] in values}
        for annotator, score in agreement.gold_accuracy(field_units_, field_gold).items():
            gold_scores[annotator]["correct"] += score["correct"]
            gold_scores[annotator]["items"] += score["items"]
    annotators: dict = defaultdict(lambda: {"annotations": 0, "times_ms": [], "first": None, "last": None})
    for annotations in grouped.values():
        for annotation in annotations:
            entry = annotators[annotation.annotator]
            entry["annotations"] += 1
            if annotation.time_spent_ms is not None:
                entry["times_ms"].append(annotation.time_spent_ms)
            entry["first"] = min(filter(None, [entry["first"], annotation.created_at]))
            entry["last"] = max(filter(None, [entry["last"], annotation.created_at]))
    people = []
    for username, entry in sorted(annotators.items()):
        median_s = statistics.median(entry["times_ms"]) / 1000 if entry["times_ms"] else None
        rates = consensus_rates.get(username)
        scored = gold_scores.get(username)
        people.append({
            "annotator": username, "annotations": entry["annotations"], "median_time_s": median_s,
            "per_hour": _per_hour(entry["annotations"], entry["first"], entry["last"], median_s),
            "consensus_agreement": sum(rates) / len(rates) if rates else None,
            "gold_items": scored["items"] if scored else 0,
            "gold_accuracy": scored["correct"] / scored["items"] if scored and scored["items"] else None,
        })
    return {"fields": per_field, "annotators": people}


def _per_hour(annotations: int, first, last, median_s: float | None) -> float | None:
    """Items an hour at this annotator's pace: from the time they spent per item when the client
    recorded it, else from the span of their submissions (gaps of n items over n - 1 intervals),
    when that span is long enough to mean something (a script's burst is not a pace)."""
    if median_s:
        return 3600 / median_s
    span_s = (last - first).total_seconds() if annotations > 1 else 0
    return (annotations - 1) * 3600 / span_s if span_s >= MIN_PACE_SPAN_S else None


MIN_PACE_SPAN_S = 60


def disagreement_item_ids(campaign: Campaign) -> list[int]:
    """Examples whose annotators disagree on any agreement field and that nobody adjudicated yet:
    more than one distinct answer to a field, counted by the database (answers are normalised
    when stored, a label set in the form's order), so the review filter of a large campaign holds
    no Python loop over its answers."""
    answers = Annotation.objects.filter(item__campaign=campaign, skipped=False, item__adjudicated_values__isnull=True)
    items: set[int] = set()
    for field in campaign.schema.fields:
        if field_type(field).agreement_level:
            items.update(answers.values("item_id")
                         .annotate(answers=Count(KeyTextTransform(field["name"], "values"), distinct=True))
                         .filter(answers__gt=1).values_list("item_id", flat=True))
    return sorted(items)


def resolve(fields: list[dict], item: Item, annotations: list[Annotation], mode: str) -> tuple[dict | None, float]:
    """(the example's resolved answer or None when it has none under `mode`, its agreement).

    Adjudication wins; then a reviewer's correction or acceptance; then, in "majority" mode, the
    most common answer per field (text and spans: the earliest answer). Agreement is the lowest
    share of annotators behind the majority over the agreement fields (1.0 with one annotator)."""
    shares = []
    for field in fields:
        if field_type(field).agreement_level:
            answers = {a.annotator_id: hashable(a.values[field["name"]]) for a in annotations
                       if field["name"] in a.values}
            if answers:
                shares.append(agreement.majority(answers)[1])
    score = min(shares) if shares else 1.0
    if item.adjudicated_values is not None:
        return item.adjudicated_values, score
    reviewed = [a for a in annotations if a.review in (Annotation.Review.ACCEPTED, Annotation.Review.CORRECTED)]
    if reviewed:
        chosen = reviewed[0]
        return (chosen.reviewed_values if chosen.review == Annotation.Review.CORRECTED else chosen.values), score
    if mode != "majority" or not annotations:
        return None, score
    usable = [a for a in annotations if a.review != Annotation.Review.REJECTED] or annotations
    resolved = {}
    for field in fields:
        name = field["name"]
        given = [a.values[name] for a in usable if name in a.values]
        if not given:
            continue
        if field_type(field).agreement_level:
            winner, _ = agreement.majority({i: hashable(v) for i, v in enumerate(given)})
            if winner is None:
                return None, score  # a tie for first: needs adjudication
            resolved[name] = next(v for v in given if hashable(v) == winner)
        else:
            resolved[name] = given[0]
    return resolved, score
