"""The principal cache (apps/core/principal_cache.py) on the annotators' hot path: 50 annotators
looping next -> submit over HTTP, each with its own API token, against the production server with
the cache (the default) and without it (PRINCIPAL_CACHE=0), same run.

Both servers serve the same PostgreSQL database and 10,000-example campaign (annotate_concurrent's
seeding and load: bench/annotate_concurrent.py), each as `manage.py up` starts it; phases of
PHASE_S / 2 seconds alternate between them (ABBA, BENCH_ANNOTATE_ROUNDS rounds) so other load on the
machine falls on both alike. Reported: annotations/s with / without (the ratio), p50/p99 of next and
submit. Target: the cache must not cost throughput (ratio >= 1.0); what it saves per request is the
token and membership queries (2 of next's 11 before it)."""

from bench.annotate_concurrent import (
    PHASE_S,
    ROUNDS,
    SMALL_DB,
    SMALL_ITEMS,
    WARMUP_S,
    Side,
    _check,
    _drive,
    _seed_small,
    _sessions,
    _start_server,
    _vacuum,
)
from bench.stack import django_already_set_up, live_stack, rerun_in_child

NAME = "principal_cache_throughput"


def run() -> list[dict]:
    if django_already_set_up():
        return rerun_in_child("bench.principal_cache", [NAME])
    with live_stack(SMALL_DB, prefix="bench-principal-", pool=False) as stack:
        from django.db import connection

        from bench.report import percentile, publish, result

        seeded = _seed_small()
        _vacuum()
        connection.close()
        cached_url = _start_server(stack, stack.database)
        uncached_url = _start_server(stack, stack.database, {"PRINCIPAL_CACHE": "0"})
        sessions = _sessions(seeded["tokens"])
        campaign = seeded["small_campaign"]
        sides = {"cached": Side("cached", cached_url, campaign, SMALL_ITEMS, sessions),
                 "uncached": Side("uncached", uncached_url, campaign, SMALL_ITEMS, sessions)}
        for side in sides.values():
            _drive(side, WARMUP_S, record=False)
        order = ["cached", "uncached"]
        for round_ in range(ROUNDS):
            for name in (order + order[::-1]) if round_ % 2 == 0 else (order[::-1] + order):
                _drive(sides[name], PHASE_S / 2, record=True)
                print(f"  round {round_ + 1} {name}: {sides[name].annotations} annotations so far"
                      f"{', errors: ' + str(len(sides[name].errors)) if sides[name].errors else ''}", flush=True)
        stack.stop()  # every request answered and written before the check
        both = Side("both", "", campaign, SMALL_ITEMS, sessions)
        both.submitted_items = sides["cached"].submitted_items + sides["uncached"].submitted_items
        check = _check(stack.database, campaign, both)
        connection.close()

    def rate(side: Side) -> float:
        return side.annotations / side.seconds

    cached, uncached = sides["cached"], sides["uncached"]
    clean = not cached.errors and not uncached.errors and check["nothing_lost"]
    value, base = rate(cached), rate(uncached)
    extra = {side.name: {"annotations": side.annotations, "seconds": round(side.seconds, 2),
                         "annotations_per_s": round(rate(side), 2),
                         **{f"{kind}_p{q}_ms": round(percentile(samples, q), 2)
                            for kind, samples in (("next", side.next_ms), ("submit", side.submit_ms))
                            for q in (50, 99)},
                         "error_count": len(side.errors), "errors": side.errors[:10]}
             for side in (cached, uncached)}
    results = [result(
        name=NAME, metric="annotations/s, 50 annotators with API tokens, next + submit, principal cache on",
        unit="annotations/s", value=value, baseline_what="same run, PRINCIPAL_CACHE=0 (token and membership "
                                                         "read from the database every request)",
        baseline_value=base, target="ratio >= 1.0", passed=value / base >= 1.0 and clean,
        extra={**extra, "all_requests_ok": clean, "phase_s": PHASE_S / 2, "phases_per_side": 2 * ROUNDS})]
    publish(results)
    return results


if __name__ == "__main__":
    run()
