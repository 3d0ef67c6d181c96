"""Reads of what serving did: per model version and alias, the requests, failures, time to first
token and request-time percentiles, tokens in and out, tokens/s and what it cost, over a window
and per time bucket. Computed from the generation rows (each keeps its timings), so every figure
is one the caller could recompute from the rows."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Avg, Count
from django.utils import timezone

from apps.registry.models import RegisteredModel
from apps.registry.services import alias_versions
from apps.serving.canary import canary_health, percentile
from apps.serving.models import Capture, Generation

# The newest generations read for one window: beyond it the figures are of a sample, and say so.
MAX_ROWS = 50_000
FIELDS = ("model_id", "alias_id", "alias__name", "state", "time_to_first_token_s", "total_s", "prompt_tokens",
          "completion_tokens", "created_at")


def summarize(rows: list[dict]) -> dict:
    """The figures of a set of generation rows (dicts with FIELDS)."""
    failed = sum(1 for r in rows if r["state"] == Generation.State.FAILED)
    done = [r for r in rows if r["state"] == Generation.State.SUCCEEDED]
    latencies = sorted(r["total_s"] for r in done if r["total_s"] is not None)
    ttfts = sorted(r["time_to_first_token_s"] for r in done if r["time_to_first_token_s"] is not None)
    tokens_in = sum(r["prompt_tokens"] for r in rows)
    tokens_out = sum(r["completion_tokens"] for r in rows)
    busy_s = sum(latencies)
    price = settings.SERVING_PRICE_PER_1K_TOKENS
    return {"requests": len(rows), "errors": failed, "error_rate": round(failed / len(rows), 4) if rows else None,
            "ttft_p50_s": percentile(ttfts, 0.5), "ttft_p99_s": percentile(ttfts, 0.99),
            "latency_p50_s": percentile(latencies, 0.5), "latency_p99_s": percentile(latencies, 0.99),
            "tokens_in": tokens_in, "tokens_out": tokens_out,
            "tokens_per_s": round(sum(r["completion_tokens"] for r in done) / busy_s, 2) if busy_s else None,
            "worker_seconds": round(busy_s, 3),
            "cost": None if price is None else round((tokens_in + tokens_out) / 1000 * price, 6)}


def alias_canary_health(alias) -> dict | None:
    """How an alias's canary and stable versions are doing since the canary started (None without
    one): requests, error rate, p99, and with a quality judge their mean judge scores."""
    return canary_health(alias)


def judged_quality(models, since: datetime) -> dict[tuple[int, str], dict]:
    """(version, alias name) → the mean score (0..1) its alias's quality judge gave its captured
    answers since `since`, and how many it scored (apps.evaluation.canary_judging)."""
    rows = (Capture.objects.filter(version__in=models, created_at__gte=since, judge_score__isnull=False)
            .values("version_id", "alias__name").annotate(quality=Avg("judge_score"), judged=Count("id")))
    return {(r["version_id"], r["alias__name"]): {"quality": round(r["quality"], 4), "judged": r["judged"]}
            for r in rows}


def generation_rows(models, since: datetime) -> tuple[list[dict], bool]:
    """The ended generations of `models` since `since`, newest first, and whether they were cut at MAX_ROWS."""
    rows = list(Generation.objects.filter(model__in=models, created_at__gte=since, state__in=Generation.ENDED)
                .order_by("-created_at").values(*FIELDS)[:MAX_ROWS + 1])
    return rows[:MAX_ROWS], len(rows) > MAX_ROWS


def serving_metrics(model: RegisteredModel, *, hours: int = 24, bucket_minutes: int = 60,
                    now: datetime | None = None) -> dict:
    """Serving figures of `model` and its versions (the model, its adapters and their merges) over
    the last `hours`: one line per (version, alias) for the whole window, and a series of
    buckets per version for the charts."""
    now = now or timezone.now()
    since = now - timedelta(hours=hours)
    versions = {m.pk: m.name for m in alias_versions(model)}
    rows, sampled = generation_rows(list(versions), since)
    by_line: dict[tuple, list[dict]] = defaultdict(list)
    by_bucket: dict[tuple, list[dict]] = defaultdict(list)
    step = timedelta(minutes=bucket_minutes)
    for row in rows:
        by_line[(row["model_id"], row["alias__name"] or "")].append(row)
        bucket = since + step * int((row["created_at"] - since) / step)
        by_bucket[(row["model_id"], bucket)].append(row)
    judged = judged_quality(list(versions), since)
    lines = [{"version": version, "version_name": versions.get(version, "?"), "alias": alias or None,
              **summarize(line), **judged.get((version, alias), {"quality": None, "judged": 0})}
             for (version, alias), line in by_line.items()]
    lines.sort(key=lambda line: (line["version_name"].lower(), line["alias"] or ""))
    series: dict[int, list[dict]] = defaultdict(list)
    for (version, bucket), bucket_rows in sorted(by_bucket.items(), key=lambda item: item[0][1]):
        figures = summarize(bucket_rows)
        series[version].append({"at": bucket.isoformat(), "requests": figures["requests"],
                                "errors": figures["errors"], "latency_p99_s": figures["latency_p99_s"],
                                "ttft_p99_s": figures["ttft_p99_s"], "tokens_per_s": figures["tokens_per_s"]})
    return {"since": since.isoformat(), "until": now.isoformat(), "bucket_minutes": bucket_minutes,
            "sampled": sampled, "price_per_1k_tokens": settings.SERVING_PRICE_PER_1K_TOKENS, "lines": lines,
            "series": [{"version": version, "version_name": versions.get(version, "?"), "points": points}
                       for version, points in sorted(series.items())]}


def recent_lines(*, minutes: int = 5, now: datetime | None = None) -> list[dict]:
    """Every (model family, version, alias) served in the last `minutes`, with its figures: what a
    Prometheus scrape reports (a window, not a counter: rows are deleted with their project)."""
    now = now or timezone.now()
    rows = list(Generation.objects.filter(created_at__gte=now - timedelta(minutes=minutes),
                                          state__in=Generation.ENDED)
                .values(*FIELDS, "model__name", "alias__model__name", "project_id")[:MAX_ROWS])
    grouped: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[(row["project_id"], row["alias__model__name"] or row["model__name"], row["model__name"],
                 row["alias__name"] or "")].append(row)
    return [{"project": project, "model": model, "version": version, "alias": alias, **summarize(group)}
            for (project, model, version, alias), group in sorted(grouped.items())]


def in_flight_by_project() -> dict[int, int]:
    """Generations each project runs now (apps.serving.limits counts them for its limits)."""
    from apps.serving.limits import running_by_project

    return running_by_project()
