"""Production traffic back into data: captures of /v1 answers through aliases that log their
traffic (sampled, personal data replaced at capture, kept for the alias's retention), the
users' feedback on them, and captures turned into a dataset version through the import
pipeline (a job like any import: progress, cancel, an immutable version at the end)."""

from __future__ import annotations

import hashlib
import json
import tempfile
from datetime import timedelta

from django.core.files import File
from django.db import transaction
from django.utils import timezone

from apps.core.errors import Invalid, NotFound
from apps.datasets.models import Dataset
from apps.datasets.services import import_create, import_start
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.registry.models import ModelAlias
from apps.serving.models import Capture, Generation
from workers.pii import redact_text, scan_text

MAX_COMMENT = 2000
MAX_RETENTION_DAYS = 3650
# A dataset made from captures holds at most this many (the newest that match).
MAX_DATASET_ROWS = 100_000


def completion_id(generation: Generation) -> str:
    """The id the client was given for this answer (openai_api.Reply): its request's first choice's."""
    return f"{'chatcmpl' if generation.messages is not None else 'cmpl'}-{generation.first_choice_id or generation.pk}"


def sampled(generation_id: int, rate: float) -> bool:
    """Whether a generation is in the alias's sample: a hash of its id, so the choice is the
    same wherever it is made and a rate of 0.25 keeps a quarter of the answers."""
    digest = hashlib.sha256(f"capture:{generation_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 10_000 < round(rate * 10_000)


def _redacted(text: str) -> tuple[str, int]:
    findings = scan_text(text)
    return (redact_text(text, findings), len(findings)) if findings else (text, 0)


def capture_generation(generation: Generation) -> Capture | None:
    """Keep an ended /v1 answer when its alias logs traffic and it is in the sample. With
    redaction on, only the redacted text is ever written."""
    if generation.alias_id is None or generation.source != Generation.Source.API \
            or generation.state != Generation.State.SUCCEEDED:
        return None
    alias = ModelAlias.objects.filter(pk=generation.alias_id, capture_enabled=True).first()
    # Sampled by request: the n choices of one are kept or left together.
    if alias is None or not sampled(generation.first_choice_id or generation.pk, alias.capture_sample_rate):
        return None
    messages = generation.messages if generation.messages is not None else \
        [{"role": "user", "content": generation.prompt or ""}]
    messages = [{"role": m.get("role"), "content": str(m.get("content", ""))} for m in messages]
    response, redactions = generation.output, 0
    if alias.capture_redact:
        kept = []
        for message in messages:
            content, found = _redacted(message["content"])
            kept.append({**message, "content": content})
            redactions += found
        messages = kept
        response, found = _redacted(response)
        redactions += found
    capture, _ = Capture.objects.get_or_create(generation=generation, defaults={
        "project_id": generation.project_id, "alias": alias, "version_id": generation.model_id,
        "completion_id": completion_id(generation), "choice_index": generation.choice_index, "messages": messages, "response": response,
        "redacted": alias.capture_redact, "redactions": redactions, "latency_s": generation.total_s,
        "time_to_first_token_s": generation.time_to_first_token_s, "prompt_tokens": generation.prompt_tokens,
        "completion_tokens": generation.completion_tokens})
    return capture


def capture_settings(*, user, alias: ModelAlias, enabled, sample_rate=None, retention_days=None, redact=None,
                     token=None, ip_address: str | None = None) -> ModelAlias:
    """Turn request logging of an alias on or off, with its sample rate, retention and redaction
    (one audited action; model.alias, and model.promote for a protected alias)."""
    policy.require(user, "model.alias", alias.model, token)
    if alias.protected:
        policy.require(user, "model.promote", alias.model, token)
    if not isinstance(enabled, bool):
        raise Invalid("enabled is true or false.", field="enabled")
    rate = alias.capture_sample_rate if sample_rate is None else sample_rate
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1:
        raise Invalid("sample_rate is the share of requests kept, above 0 and at most 1.", field="sample_rate")
    days = alias.capture_retention_days if retention_days is None else retention_days
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_RETENTION_DAYS:
        raise Invalid(f"retention_days is how many days captures are kept, from 1 to {MAX_RETENTION_DAYS}.",
                      field="retention_days")
    keep_redacting = alias.capture_redact if redact is None else redact
    if not isinstance(keep_redacting, bool):
        raise Invalid("redact is true or false.", field="redact")
    before = {"enabled": alias.capture_enabled, "sample_rate": alias.capture_sample_rate,
              "retention_days": alias.capture_retention_days, "redact": alias.capture_redact}
    alias.capture_enabled, alias.capture_sample_rate = enabled, float(rate)
    alias.capture_retention_days, alias.capture_redact = days, keep_redacting
    with transaction.atomic():
        alias.save(update_fields=["capture_enabled", "capture_sample_rate", "capture_retention_days",
                                  "capture_redact", "updated_at"])
        audit_record(actor=user, action="model.alias_capture", project=alias.project, target=alias,
                     ip_address=ip_address, before=before,
                     after={"enabled": enabled, "sample_rate": float(rate), "retention_days": days,
                            "redact": keep_redacting})
    return alias


def feedback_record(*, user, project, completion: str, score, comment=None, choice_index=0, token=None) -> Capture:
    """A client's feedback on an answer it was given (by its completion id, and the choice's index
    when it asked for n > 1): a score, and a comment redacted like the capture. Only captured
    answers take feedback."""
    policy.require(user, "model.generate", project, token)
    if not isinstance(completion, str) or not completion:
        raise Invalid("completion_id is the id of the answer (chatcmpl-… or cmpl-…).", field="completion_id")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not -1000 <= score <= 1000:
        raise Invalid("score is a number from -1000 to 1000 (e.g. 1 / -1, or 1-5).", field="score")
    if comment is not None and (not isinstance(comment, str) or len(comment) > MAX_COMMENT):
        raise Invalid(f"comment is text of at most {MAX_COMMENT} characters.", field="comment")
    if isinstance(choice_index, bool) or not isinstance(choice_index, int) or choice_index < 0:
        raise Invalid("choice_index is the index of the choice in the answer's choices (0 for the first).",
                      field="choice_index")
    with transaction.atomic():
        choices = Capture.objects.select_for_update().select_related("alias").filter(
            project=project, completion_id=completion)
        capture = choices.filter(choice_index=choice_index).first()
        if capture is None:
            count = choices.count()
            if count:
                raise Invalid(f"choice_index is out of range: {completion[:60]} has {count} choice"
                              f"{'s' if count > 1 else ''} (0 to {count - 1}).", field="choice_index")
            raise _not_found(f"No captured answer {completion[:60]!r}: request logging is off for its alias, or "
                             "the answer was not in the sample.", "completion_id")
        text = comment or ""
        if capture.alias.capture_redact and text:
            text, found = _redacted(text)
            capture.redactions += found
        capture.feedback_score, capture.feedback_comment, capture.feedback_at = float(score), text, timezone.now()
        capture.save(update_fields=["feedback_score", "feedback_comment", "feedback_at", "redactions"])
    return capture


def captures_expire(*, now=None) -> int:
    """Delete every capture older than its alias's retention. Returns how many went."""
    now = now or timezone.now()
    gone = 0
    for alias_id, days in ModelAlias.objects.filter(captures__isnull=False).values_list(
            "pk", "capture_retention_days").distinct():
        gone += Capture.objects.filter(alias_id=alias_id, created_at__lt=now - timedelta(days=days)).delete()[0]
    return gone


FEEDBACK_FILTERS = ("any", "with", "without", "positive", "negative")


def captures_matching(alias: ModelAlias, *, version=None, since=None, until=None, feedback: str = "any"):
    found = alias.captures.all()
    if version is not None:
        found = found.filter(version_id=version)
    if since is not None:
        found = found.filter(created_at__gte=since)
    if until is not None:
        found = found.filter(created_at__lt=until)
    if feedback not in FEEDBACK_FILTERS:
        raise Invalid(f"feedback is one of {', '.join(FEEDBACK_FILTERS)}.", field="feedback")
    return {"any": found, "with": found.filter(feedback_score__isnull=False),
            "without": found.filter(feedback_score__isnull=True), "positive": found.filter(feedback_score__gt=0),
            "negative": found.filter(feedback_score__lt=0)}[feedback]


def captures_to_dataset(*, user, alias: ModelAlias, dataset_id, version=None, since=None, until=None,
                        feedback: str = "any", message: str = "", token=None, ip_address: str | None = None):
    """Queue an import of the matching captures into a dataset of the project as a new version
    (messages, response, id; the version, alias, timings and feedback as metadata). Returns the
    import job and how many captures it holds."""
    policy.require(user, "dataset.view", alias.project, token)
    dataset = Dataset.objects.filter(pk=_int(dataset_id), project=alias.project).first() if _int(dataset_id) else None
    if dataset is None or not policy.can(user, "dataset.view", dataset, token):
        raise _not_found("No such dataset in this project.", "dataset")
    if since is not None and until is not None and since >= until:
        raise Invalid("since is before until.", field="since")
    rows = captures_matching(alias, version=version, since=since, until=until, feedback=feedback)
    rows = list(rows.order_by("-created_at")[:MAX_DATASET_ROWS])
    if not rows:
        raise Invalid("No capture matches these filters.", field="filters")
    with tempfile.NamedTemporaryFile("w+b", suffix=".jsonl") as spool:
        for capture in reversed(rows):  # oldest first: the version reads as the traffic came
            spool.write(json.dumps({
                "id": capture.completion_id + (f"#{capture.choice_index}" if capture.choice_index else ""),
                "choice_index": capture.choice_index, "messages": capture.messages, "response": capture.response,
                "model_version": capture.version_id, "alias": f"{alias.model.name}@{alias.name}",
                "captured_at": capture.created_at.isoformat(), "latency_s": capture.latency_s,
                "feedback_score": capture.feedback_score, "feedback_comment": capture.feedback_comment,
                "redacted": capture.redacted}, ensure_ascii=False).encode() + b"\n")
        spool.flush()
        spool.seek(0)
        job = import_create(user=user, dataset=dataset, upload=File(spool, name=f"captures-{alias.name}.jsonl"),
                            token=token, ip_address=ip_address)
    job = import_start(user=user, job=job, mapping={"id": "id", "messages": "messages", "response": "response"},
                       message=message or f"{len(rows)} captures of {alias.model.name}@{alias.name}", token=token,
                       ip_address=ip_address)
    audit_record(actor=user, action="model.captures_to_dataset", project=alias.project, target=alias,
                 ip_address=ip_address, after={"dataset": dataset.pk, "import": job.pk, "captures": len(rows),
                                               "feedback": feedback})
    return job, len(rows)


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _not_found(message: str, field: str) -> NotFound:
    missing = NotFound(message)
    missing.field = field
    return missing
