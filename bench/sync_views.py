"""Heavy sync views on the production server: how long each takes, and whether /healthz stalls
while one is in flight.

Fixtures on the embedded default (SQLite + embedded Redis, a fresh data folder): a dataset with
two ready versions of 100,000 rows (1% of rows changed, 1% moved to another split), whose diff is
measured three ways: the overview with its counts kept (they are computed once per pair of
versions), the overview with the counts forgotten before each request (`_uncounted`), and a page
of changed rows from the middle of the version; the newer version's statistics page and its page
with a PII scan's report; a comparison of 8 models with 50,000 votes; a campaign of 5,000 items x 3 annotators on one single_label field.
The leaderboards and the campaign's numbers are memoized on their inputs, so their endpoints are
measured twice: with one vote or answer changed before each request (recomputed, as while people
vote or annotate) and with nothing changed (`_cached`).
The server is uvicorn as `manage.py up` runs it (`workbench.server.uvicorn_argv`, one process, the
embedded default's WEB_WORKERS), logged in through the login form as the project's owner.

Per endpoint: one warm-up request, then /healthz polled every 10 ms with no heavy request (A),
during each of 5 heavy requests one after another (B), and again with none (A): idle before and
after, the two A windows together as long as the B ones (1-10 s each). Target: /healthz p99
during a heavy request <= 100 ms (no request may block the others); each request's own time
(<= 500 ms) is reported. `python -m bench sync_views --only NAME[,NAME...]` measures some
endpoints (and seeds only their fixtures).
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid

from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from bench.stack import django_already_set_up, rerun_in_child, start_web, stop_web

ROWS = 100_000  # per dataset version
MODELS, PROMPTS, VOTERS, VOTES = 8, 100, 18, 50_000  # 18 voters x 100 prompts x 28 model pairs >= 50,000
ITEMS, ANNOTATORS = 5_000, 3
REQUESTS = 5
POLL_S = 0.010
# Each idle (A) window at least 1 s (more than a handful of polls), at most 10 s (a slow page
# would otherwise double the run for no better p99: 10 s is ~700 polls).
MIN_BASELINE_S, MAX_BASELINE_S = 1.0, 10.0
TARGET_HEALTHZ_P99_MS = 100.0
TARGET_REQUEST_MS = 500.0
PASSWORD = "bench-password-1"
LABELS = ("positive", "negative", "neutral")
ENDPOINTS = ["dataset_diff_page", "dataset_diff_page_uncounted", "dataset_diff_changed_page", "version_stats_page",
             "version_page_pii_report",
             "comparison_leaderboard_api", "comparison_leaderboard_page", "project_leaderboard_api", "comparison_leaderboard_api_cached", "comparison_leaderboard_page_cached",
             "project_leaderboard_api_cached", "campaign_detail_page", "campaign_quality_api",
             "campaign_detail_page_cached", "campaign_quality_api_cached"]
SPLITS = ("train", "validation", "test")


# --- fixtures ------------------------------------------------------------------------------------

def _seed_diff(project, owner, only: list[str]) -> dict[str, str]:
    from apps.datasets.models import Dataset
    from apps.datasets.writer import write_version

    roles = {"id": "id", "prompt": "prompt", "response": "response", "label": "label"}

    def split(i: int, moved: bool) -> str:  # 80/10/10; a moved row goes to the next one
        return SPLITS[((i % 10 > 7) + (i % 10 > 8) + moved) % 3]

    def records(version: int):
        for i in range(ROWS):
            changed = version == 2 and i % 100 == 0  # 1% of rows: same id, another response
            yield {"id": f"r{i}", "prompt": f"Question {i} about topic {i % 97}",
                   "response": f"Answer {i}" + (" (edited)" if changed else "."), "label": LABELS[i % 3]}

    dataset = Dataset.objects.create(project=project, name="Questions", created_by=owner)
    first = write_version(dataset=dataset, author=owner, roles=roles, records=records(1),
                          splits=(split(i, False) for i in range(ROWS)))
    # 1% of rows (i % 100 == 50, never a changed one) move to the next split.
    second = write_version(dataset=dataset, author=owner, roles=roles, records=records(2), parent=first,
                           splits=(split(i, i % 100 == 50) for i in range(ROWS)))
    url = reverse("datasets:diff", kwargs={"project_id": project.pk, "dataset_id": dataset.pk})

    def counts_forgotten() -> None:
        """As the first time anyone compares the two versions: the counts are computed again."""
        from apps.core.memo import forget
        from apps.datasets.selectors import DIFF_COUNTS_MEMO, diff_counts_inputs

        forget(DIFF_COUNTS_MEMO, diff_counts_inputs(first, second))

    # The overview (counts kept after the first request, as a person paging through it sees
    # it), the same computed afresh, and a page of changed rows in the middle of the version.
    urls = {"dataset_diff_page": url, "dataset_diff_page_uncounted": (url, counts_forgotten),
            "dataset_diff_changed_page": f"{url}?old=1&new=2&show=changed&after={ROWS // 2}"}
    # The 100,000-row version's statistics, and its page with a PII scan's report (the scan run
    # here as the worker would, only when that page is measured: it reads every row).
    kwargs = {"project_id": project.pk, "dataset_id": dataset.pk, "number": second.number}
    urls["version_stats_page"] = reverse("datasets:stats", kwargs=kwargs)
    if "version_page_pii_report" in only:
        from apps.datasets.derive import run_derive
        from apps.datasets.services import version_pii_scan_start

        scan = version_pii_scan_start(user=owner, version=second)
        run_derive(scan.pk)
        scan.refresh_from_db()
        assert scan.state == "succeeded" and scan.result["rows_scanned"] == ROWS, (scan.state, scan.error)
    urls["version_page_pii_report"] = reverse("datasets:version", kwargs=kwargs)
    return urls


def _seed_comparison(project, owner) -> dict[str, str]:
    from apps.comparison.models import Pair, Vote
    from tests.comparison.factories import make_comparison

    users = get_user_model().objects
    comparison = make_comparison(project, owner, models=MODELS, prompts=[f"Prompt {i}" for i in range(PROMPTS)],
                                 name="Eight models")
    contestants = list(comparison.contestants.order_by("position"))
    prompts = list(comparison.prompts.order_by("position"))
    voters = users.bulk_create([users.model(username=f"bench-voter-{i:02}", password="!") for i in range(VOTERS)])
    rng = random.Random(7)
    # Every (voter, prompt, model pair) once, as the voting service serves them; bulk_create
    # because 50,000 votes through the API would take minutes.
    triples = itertools.islice(((v, p, a, b) for v in voters for p in prompts
                                for a, b in itertools.combinations(contestants, 2)), VOTES)
    pairs = Pair.objects.bulk_create([Pair(comparison=comparison, voter=v, prompt=p, first=a, second=b,
                                           first_on_left=rng.random() < 0.5) for v, p, a, b in triples],
                                     batch_size=5000)
    votes = []
    for n, pair in enumerate(pairs):  # 10% ties, 5% both bad; the later model wins more often
        choice, winner, loser = rng.choices(("tie", "both_bad", "win"), (10, 5, 85))[0], None, None
        if choice == "win":
            later = rng.random() < 0.5 + 0.05 * (pair.second.position - pair.first.position)
            winner, loser = (pair.second, pair.first) if later else (pair.first, pair.second)
            choice = "a" if (winner == pair.first) == pair.first_on_left else "b"
        votes.append(Vote(pair=pair, comparison=comparison, voter_id=pair.voter_id, choice=choice, winner=winner,
                          loser=loser, client_id=f"bench-{n}"))
    Vote.objects.bulk_create(votes, batch_size=5000)
    ties = iter(Vote.objects.filter(comparison=comparison, choice="tie").order_by("pk").values_list("pk", flat=True))

    def vote_changed() -> None:
        """As after a vote: one more tie becomes both-bad, a count never seen before, so the next read refits."""
        Vote.objects.filter(pk=next(ties)).update(choice="both_bad")

    urls = {"comparison_leaderboard_api": reverse("api-comparison-leaderboard",
                                                  kwargs={"comparison_id": comparison.pk}),
            "comparison_leaderboard_page": reverse("comparison:leaderboard",
                                                   kwargs={"project_id": project.pk, "comparison_id": comparison.pk}),
            "project_leaderboard_api": reverse("api-project-leaderboard", kwargs={"project_id": project.pk})}
    # The board is memoized on the votes: both sides are measured, as for the campaign below.
    return {**{name: (url, vote_changed) for name, url in urls.items()},
            **{f"{name}_cached": url for name, url in urls.items()}}


def _seed_campaign(project, owner) -> dict:
    from apps.annotation.models import Annotation, Item
    from apps.annotation.services import campaign_create, schema_create
    from apps.datasets.models import Dataset
    from apps.datasets.writer import write_version
    from apps.projects.services import member_add

    annotators = []
    for n in range(ANNOTATORS):
        annotators.append(get_user_model().objects.create_user(f"bench-annotator-{n}", password=None))
        member_add(actor=owner, project=project, username=annotators[-1].username, role="annotator")
    dataset = Dataset.objects.create(project=project, name="Reviews", created_by=owner)
    version = write_version(dataset=dataset, author=owner, roles={"id": "id", "prompt": "prompt", "label": "label"},
                            records=({"id": f"r{i}", "prompt": f"Review {i}: the parcel arrived",
                                      "label": LABELS[i % 3]} for i in range(ITEMS)))
    schema = schema_create(user=owner, project=project, name="Sentiment",
                           fields=[{"name": "sentiment", "type": "single_label", "labels": list(LABELS)}])
    campaign = campaign_create(user=owner, project=project, name="Sentiment 5k", dataset_version_id=version.pk,
                               schema_id=schema.pk, overlap=ANNOTATORS)
    rng = random.Random(11)
    # Each annotator agrees with the row's label 80% of the time: real disagreements to count.
    Annotation.objects.bulk_create(
        [Annotation(item=item, annotator=person, schema=schema, client_id=uuid.UUID(int=rng.getrandbits(128)),
                    values={"sentiment": LABELS[item.position % 3] if rng.random() < 0.8 else rng.choice(LABELS)},
                    time_spent_ms=rng.randint(2_000, 20_000))
         for item in campaign.items.order_by("position") for person in annotators], batch_size=5000)
    Item.objects.filter(campaign=campaign).update(completed=ANNOTATORS)
    touched = Annotation.objects.filter(item__campaign=campaign).order_by("pk")[:1].get()

    def answer_changed() -> None:
        """As after any submit or edit: the quality numbers' cache key changes, the next read computes."""
        Annotation.objects.filter(pk=touched.pk).update(updated_at=timezone.now())

    detail = reverse("annotation:detail", kwargs={"project_id": project.pk, "campaign_id": campaign.pk})
    api = reverse("api-campaign-quality", kwargs={"campaign_id": campaign.pk})
    # Quality is kept in the shared cache until an answer changes: both sides are measured.
    return {"campaign_detail_page": (detail, answer_changed), "campaign_quality_api": (api, answer_changed),
            "campaign_detail_page_cached": detail, "campaign_quality_api_cached": api}


def _seed(only: list[str]) -> dict:  # name: url, or (url, what to do before each request)
    from apps.projects.services import project_create

    owner = get_user_model().objects.create_user("bench-owner", password=PASSWORD)
    project = project_create(user=owner, name="Bench sync views")
    urls = {}
    # Only the fixtures the endpoints asked for: the diff alone seeds in a third of the time.
    if any(name.startswith(("dataset_", "version_")) for name in only):
        urls.update(_seed_diff(project, owner, only))
    for seed, prefixes in ((_seed_comparison, ("comparison_", "project_")), (_seed_campaign, ("campaign_",))):
        if any(name.startswith(prefixes) for name in only):
            urls.update(seed(project, owner))
    return {name: urls[name] for name in only}


# --- the server ----------------------------------------------------------------------------------

def _start_server(data_dir: str) -> tuple[subprocess.Popen, str]:
    # One process, as `manage.py up` serves the embedded default (WEB_WORKERS).
    return start_web({**os.environ, "WORKBENCH_DATA_DIR": data_dir}, workers=1)


def _login(base: str):
    """A requests.Session logged in through the login form (CSRF token from the page), as a browser."""
    import requests

    session = requests.Session()
    page = session.get(f"{base}/accounts/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = session.post(f"{base}/accounts/login/", data={"username": "bench-owner", "password": PASSWORD,
                                                             "csrfmiddlewaretoken": token},
                            headers={"Referer": f"{base}/accounts/login/"}, allow_redirects=False, timeout=30)
    assert response.status_code == 302 and "sessionid" in session.cookies, response.status_code
    return session


# --- measuring -----------------------------------------------------------------------------------

def _poll(url: str, stop: threading.Event, samples: list[tuple[float, float]]) -> None:
    """GET /healthz every POLL_S (at once when one took longer) until `stop`: (started, ms)."""
    import requests

    with requests.Session() as session:  # keep-alive, like a load balancer's checks
        next_at = time.perf_counter()
        while not stop.is_set():
            started = time.perf_counter()
            assert session.get(url, timeout=120).status_code == 200
            samples.append((started, (time.perf_counter() - started) * 1000))
            next_at += POLL_S
            time.sleep(max(next_at - time.perf_counter(), 0))


def _polled(base: str, work) -> tuple[float, list[float]]:
    """Runs `work()` with /healthz polled beside it: (work's ms, ms of the polls started during it)."""
    stop, samples = threading.Event(), []
    poller = threading.Thread(target=_poll, args=(f"{base}/healthz", stop, samples))
    poller.start()
    time.sleep(POLL_S)  # the poller's connection is open before the window starts
    started = time.perf_counter()
    work()
    ended = time.perf_counter()
    stop.set()
    poller.join()
    return (ended - started) * 1000, [ms for at, ms in samples if started <= at <= ended]


def _measure(base: str, session, url: str, before=None) -> dict:
    """`before()`, when given, runs ahead of each request, outside its window."""
    from bench.report import percentile

    def heavy() -> None:
        response = session.get(base + url, timeout=120)
        assert response.status_code == 200, (url, response.status_code)

    load = os.getloadavg()[0]
    if before:
        before()
    warm_ms, _ = _polled(base, heavy)  # templates, imports, SQLite's page cache
    # Idle, heavy, idle: the two idle windows together last as long as the 5 requests should.
    idle_s = min(max(MIN_BASELINE_S, REQUESTS * warm_ms / 1000 / 2), MAX_BASELINE_S)
    _, idle = _polled(base, lambda: time.sleep(idle_s))
    took, during = [], []
    for _ in range(REQUESTS):
        if before:
            before()
        ms, polls = _polled(base, heavy)
        took.append(ms)
        during += polls
    idle += _polled(base, lambda: time.sleep(idle_s))[1]
    return {"url": url, "before_each": before.__name__ if before else None,
            "request_median_ms": statistics.median(took), "request_max_ms": max(took), "requests_ms": took,
            "warmup_ms": warm_ms, "healthz_polls_during": len(during), "healthz_p99_ms": percentile(during, 99),
            "healthz_max_ms": max(during), "baseline_polls": len(idle),
            "baseline_p99_ms": percentile(idle, 99), "baseline_max_ms": max(idle), "load_average_1m": load}


def _options(argv: list[str] | None) -> list[str]:
    """The endpoints to measure: all, or those named by `--only NAME[,NAME...]`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench sync_views")
    parser.add_argument("--only", default=",".join(ENDPOINTS),
                        help=f"comma-separated endpoints, of: {', '.join(ENDPOINTS)}")
    only = [name for name in parser.parse_args(argv or []).only.split(",") if name]
    unknown = sorted(set(only) - set(ENDPOINTS))
    if unknown or not only:
        parser.error(f"unknown endpoint(s) {', '.join(unknown)}; known: {', '.join(ENDPOINTS)}")
    return [name for name in ENDPOINTS if name in only]


def run(argv: list[str] | None = None) -> list[dict]:
    only = _options(argv)
    if django_already_set_up():  # another benchmark set Django up in this process
        return rerun_in_child("bench.sync_views", [f"sync_{name}" for name in only], argv or [])
    data_dir = tempfile.mkdtemp(prefix="bench-sync-views-")
    os.environ.update(WORKBENCH_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="workbench.settings")
    for key in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):  # the embedded default
        os.environ.pop(key, None)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench.report import publish, result
    from workbench.embedded import EmbeddedRedis

    redis, server, summaries = EmbeddedRedis(data_dir), None, []
    try:
        redis.start()
        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        urls = _seed(only)
        print(f"sync_views: fixtures in {time.perf_counter() - started:.1f} s", flush=True)
        assert list(urls) == only
        connection.close()  # reopened only to change an answer, between requests
        server, base = _start_server(data_dir)
        session = _login(base)
        for name, spec in urls.items():
            url, before = spec if isinstance(spec, tuple) else (spec, None)
            summaries.append({"endpoint": name, **_measure(base, session, url, before)})
            print(f"  {name}: measured", flush=True)
    finally:
        if server is not None:
            stop_web(server)
        redis.stop()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"\n{'endpoint':<30} {'request ms':>15} {'healthz during':>16} {'healthz idle':>14} {'ratio':>7}")
    print(f"{'':<30} {'median / max':>15} {'p99 / max':>16} {'p99 / max':>14} {'p99':>7}")
    for s in summaries:
        print(f"{s['endpoint']:<30} {s['request_median_ms']:>7.0f} / {s['request_max_ms']:<5.0f} "
              f"{s['healthz_p99_ms']:>8.0f} / {s['healthz_max_ms']:<5.0f} {s['baseline_p99_ms']:>6.1f} / "
              f"{s['baseline_max_ms']:<5.1f} {s['healthz_p99_ms'] / s['baseline_p99_ms']:>7.1f}")
    print()
    fixtures = {"rows_per_version": ROWS, "models": MODELS, "votes": VOTES, "items": ITEMS, "annotators": ANNOTATORS,
                "server": "uvicorn_argv(workers=1), SQLite + embedded Redis", "poll_interval_ms": POLL_S * 1000}
    target = TARGET_HEALTHZ_P99_MS
    return publish([
        result(name=f"sync_{s['endpoint']}", metric=f"p99 /healthz latency while GET {s['endpoint']} is in flight",
               unit="ms", value=s["healthz_p99_ms"], baseline_what="p99 /healthz latency, nothing else in flight "
               "(before and after, same run)", baseline_value=s["baseline_p99_ms"],
               target=f"healthz p99 <= {target:g} ms", passed=s["healthz_p99_ms"] <= target,
               extra={**s, "request_target_ms": TARGET_REQUEST_MS,
                      "request_within_target": s["request_max_ms"] <= TARGET_REQUEST_MS, "fixtures": fixtures})
        for s in summaries])


if __name__ == "__main__":
    import sys

    run(sys.argv[1:])
