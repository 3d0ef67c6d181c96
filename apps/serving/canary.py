"""Judging canaries from what they served: each alias's canary version against its thresholds,
over the canary's own requests since it started, with the stable version's figures beside it;
with a quality judge, the judge's scores of both versions' captured answers
(apps.evaluation.canary_judging writes them).
The decision (roll back, step up, promote) is the registry's (`alias_canary_decide`); this side
measures, since serving owns the requests."""

from __future__ import annotations

import logging

from django.utils import timezone

from apps.registry.models import ModelAlias
from apps.registry.services import alias_canary_decide
from apps.serving.models import Capture, Generation

logger = logging.getLogger(__name__)

# Percentiles are taken over the newest requests of each side, so a check stays one bounded read.
WINDOW = 2000


def version_health(alias: ModelAlias, version_id: int, since) -> dict:
    """Requests, failures and the p99 request time of `version_id` served through `alias` since `since`."""
    rows = list(Generation.objects.filter(alias=alias, model_id=version_id, created_at__gte=since,
                                          state__in=Generation.ENDED)
                .order_by("-created_at").values_list("state", "total_s")[:WINDOW])
    failed = sum(1 for state, _ in rows if state == Generation.State.FAILED)
    times = sorted(total for state, total in rows if state == Generation.State.SUCCEEDED and total is not None)
    return {"version": version_id, "requests": len(rows), "errors": failed,
            "error_rate": round(failed / len(rows), 4) if rows else None, "p99_latency_s": percentile(times, 0.99)}


def version_quality(alias: ModelAlias, version_id: int, since) -> dict:
    """The alias's quality judge's scores (0..1) on `version_id`'s captured answers since `since`:
    how many it scored and their mean (answers it could not read are counted apart)."""
    scores = list(Capture.objects.filter(alias=alias, version_id=version_id, created_at__gte=since,
                                         judged_by_id=alias.quality_judge_id)
                  .order_by("-created_at").values_list("judge_score", flat=True)[:WINDOW])
    scored = [score for score in scores if score is not None]
    return {"judged": len(scored), "unreadable": len(scores) - len(scored),
            "quality": round(sum(scored) / len(scored), 4) if scored else None}


def percentile(ordered: list[float], q: float) -> float | None:
    """The nearest-rank percentile of sorted values (the value at or above q of them)."""
    if not ordered:
        return None
    rank = max(1, -(-int(q * 1000) * len(ordered) // 1000))  # ceil(q * n) without float drift
    return ordered[min(rank, len(ordered)) - 1]


def canary_health(alias: ModelAlias) -> dict | None:
    if alias.canary_version_id is None or alias.canary_started_at is None:
        return None
    canary = version_health(alias, alias.canary_version_id, alias.canary_started_at)
    stable = version_health(alias, alias.version_id, alias.canary_started_at)
    if alias.quality_judge_id is not None:
        canary.update(version_quality(alias, alias.canary_version_id, alias.canary_started_at))
        stable.update(version_quality(alias, alias.version_id, alias.canary_started_at))
    return {"canary": canary, "stable": stable, "breach": breach(alias, canary, stable)}


def breach(alias: ModelAlias, canary: dict, stable: dict) -> str | None:
    """Why the canary must go back, or None: error rate and latency judged only from `min_requests`
    of its own requests, quality only once each side has `min_requests` judged answers."""
    if canary["requests"] < alias.min_requests:
        return quality_breach(alias, canary, stable)
    if alias.max_error_rate is not None and canary["error_rate"] > alias.max_error_rate:
        return (f"error rate {canary['error_rate']:.1%} over {canary['requests']} requests is above the "
                f"threshold {alias.max_error_rate:.1%}")
    p99 = canary["p99_latency_s"]
    if alias.max_p99_latency_s is not None and p99 is not None and p99 > alias.max_p99_latency_s:
        return f"p99 latency {p99:.3f} s over {canary['requests']} requests is above the threshold " \
               f"{alias.max_p99_latency_s:.3f} s"
    return quality_breach(alias, canary, stable)


def quality_breach(alias: ModelAlias, canary: dict, stable: dict) -> str | None:
    if alias.quality_judge_id is None or alias.max_quality_drop is None:
        return None
    if min(canary["judged"], stable["judged"]) < alias.min_requests:
        return None
    drop = stable["quality"] - canary["quality"]
    if drop <= alias.max_quality_drop + 1e-9:  # at the threshold is within it, whatever the float rounding
        return None
    return (f"quality: the judge's mean score {canary['quality']:.3f} over {canary['judged']} answers is "
            f"{drop:.3f} below the stable version's {stable['quality']:.3f} over {stable['judged']}, more than the "
            f"allowed drop {alias.max_quality_drop:.3f}")


def canary_check(alias_id: int) -> str | None:
    """Judge one alias's canary now and act on it (see alias_canary_decide)."""
    alias = ModelAlias.objects.select_related("model").filter(pk=alias_id, canary_version__isnull=False).first()
    if alias is None:
        return None
    health = canary_health(alias)
    outcome = alias_canary_decide(alias.pk, breach=health and health["breach"], now=timezone.now())
    if outcome:
        logger.info("canary of %s@%s: %s", alias.model.name, alias.name, outcome)
    return outcome


def canary_check_all() -> dict[str, int]:
    """Every running canary (the periodic task: steps fall due with no traffic too)."""
    outcomes: dict[str, int] = {}
    for alias_id in ModelAlias.objects.filter(canary_version__isnull=False).values_list("pk", flat=True):
        outcome = canary_check(alias_id)
        if outcome:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes
