"""Scoring a canary's quality: an alias's quality judge (a calibrated pointwise judge of the
project) scores a bounded sample of the answers both its versions gave since the canary started,
as request logging captured them. Each capture keeps its score (0..1: the mean of the rubric's
criteria, workers.judging.stats.point_score); serving's periodic canary check compares the two
means (apps.serving.canary) and rolls the canary back on a breach.

The calls take the path a judge run's take (apps.evaluation.runner.judge_call): a local judge
through the inference worker's batcher, a provider's through provider_chat for the person who
started the canary (their `provider.use`, the project's budget and policy). A beat task runs it
on the `inference` queue; one tick judges at most `CANARY_JUDGE_BATCH` new answers of each side,
and a per-alias lock keeps two ticks from judging the same answers.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections

from apps.core.errors import DomainError
from apps.evaluation.runner import judge_call
from apps.registry.models import ModelAlias
from apps.serving.models import Capture
from workers.judging import PointItem, check_rubric, run_judge
from workers.judging.stats import point_score

logger = logging.getLogger(__name__)

# Longer than a tick can take (a batch of calls at their timeouts); a worker that died holding it
# lets the next tick in after this.
LOCK_S = 900


def prompt_text(messages: list[dict]) -> str:
    """What the judge is shown as the request: a lone user message as it is, a conversation turn by turn."""
    if len(messages) == 1 and messages[0].get("role") == "user":
        return str(messages[0].get("content", ""))
    return "\n\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in messages)


def judge_canary_captures(alias_id: int, *, batch: int | None = None) -> int:
    """Score up to `batch` not yet scored captures of each of the alias's two versions since its
    canary started. Returns how many were scored; a refused or failed call (a spent budget, the
    provider's error) is logged and its answers wait for the next tick."""
    batch = settings.CANARY_JUDGE_BATCH if batch is None else batch
    alias = ModelAlias.objects.select_related("quality_judge__project", "canary_started_by").filter(
        pk=alias_id, canary_version__isnull=False, quality_judge__isnull=False).first()
    if alias is None or alias.canary_started_at is None:
        return 0
    lock = f"canary-judging:{alias.pk}"
    if not cache.add(lock, 1, timeout=LOCK_S):
        return 0  # another worker is judging this alias's answers now
    try:
        return _judge(alias, batch)
    finally:
        cache.delete(lock)


def _judge(alias: ModelAlias, batch: int) -> int:
    judge = alias.quality_judge
    rubric = check_rubric(judge.rubric)
    captures = []
    for version_id in (alias.canary_version_id, alias.version_id):
        captures += list(Capture.objects.filter(alias=alias, version_id=version_id,
                                                created_at__gte=alias.canary_started_at)
                         .exclude(judged_by=judge).order_by("-created_at")[:batch])
    if not captures:
        return 0
    items = [PointItem(key=str(c.pk), prompt=prompt_text(c.messages), response=c.response) for c in captures]
    config = {"provider_model": judge.provider_model_id, "local_model": judge.local_model_id,
              "max_tokens": judge.max_tokens}
    scored = 0

    def on_item(verdicts) -> bool:
        nonlocal scored
        verdict = verdicts[0]
        score = point_score(rubric, verdict.answer) if verdict.answer is not None else None
        Capture.objects.filter(pk=int(verdict.key)).update(judged_by=judge, judge_score=score,
                                                           judge_error=verdict.error[:300])
        scored += 1
        return False

    try:
        run_judge(rubric, items, call=judge_call(judge.project, config, alias.canary_started_by, rubric),
                  on_item=on_item,
                  concurrency=settings.JUDGE_CONCURRENCY)  # beside live traffic: not the batcher's every row
    except DomainError as exc:  # the provider's own message, a spent budget, a starter without provider.use
        close_old_connections()
        logger.warning("quality judging of %s@%s stopped: %s", alias.model.name, alias.name, exc.message)
    return scored


def judge_canaries() -> int:
    """Every running canary with a quality judge (the periodic task): one whose judge cannot
    answer (a local model that fails to load) is logged and keeps no other from its scores."""
    scored = 0
    for alias_id in ModelAlias.objects.filter(canary_version__isnull=False, quality_judge__isnull=False
                                              ).values_list("pk", flat=True):
        try:
            scored += judge_canary_captures(alias_id)
        except Exception:
            close_old_connections()
            logger.exception("quality judging of alias %s failed", alias_id)
    return scored
