"""Serving figures per model version and alias (#19 item 4): from the generation rows, checked
against values worked out by hand; through the API (permissions, bad input) and in the
Prometheus exposition with version and alias labels."""

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from apps.monitoring.exposition import serving_families
from apps.serving.models import Generation
from apps.serving.selectors import serving_metrics
from tests.serving.fixtures import alias_family_fixture, ready  # noqa: F401

pytestmark = pytest.mark.django_db



def generation(project, model, *, alias=None, state="succeeded", total_s=1.0, ttft=0.1, tokens=(10, 20), ago_min=1):
    row = Generation.objects.create(project=project, model=model, alias=alias, source="api", params={}, state=state,
                                    total_s=total_s if state == "succeeded" else None,
                                    time_to_first_token_s=ttft if state == "succeeded" else None,
                                    prompt_tokens=tokens[0], completion_tokens=tokens[1] if state == "succeeded" else 0)
    Generation.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(minutes=ago_min))
    return row


def test_figures_per_version_and_alias_match_a_hand_count(family, project, settings):
    settings.SERVING_PRICE_PER_1K_TOKENS = 0.5
    base, v1, alias = family
    for total in (1.0, 2.0, 3.0, 4.0):
        generation(project, base, alias=alias, total_s=total, ttft=total / 10)
    generation(project, base, alias=alias, state="failed")
    generation(project, v1, total_s=2.0, tokens=(5, 40))  # asked for by its own name
    generation(project, v1, alias=alias, total_s=1.0, ago_min=60 * 25)  # outside the 24 h window
    generation(project, ready(project, "Unrelated"), total_s=9.0)  # not a version of this model

    figures = serving_metrics(base, hours=24)
    lines = {(line["version_name"], line["alias"]): line for line in figures["lines"]}
    assert set(lines) == {("Support", "production"), ("Support v1", None)}
    stable = lines[("Support", "production")]
    assert (stable["requests"], stable["errors"], stable["error_rate"]) == (5, 1, 0.2)
    assert (stable["latency_p50_s"], stable["latency_p99_s"]) == (2.0, 4.0)  # nearest rank of 1,2,3,4
    assert (stable["ttft_p50_s"], stable["ttft_p99_s"]) == (0.2, 0.4)
    assert (stable["tokens_in"], stable["tokens_out"]) == (50, 80)
    assert stable["tokens_per_s"] == 8.0  # 80 completion tokens over 10 busy seconds
    assert stable["worker_seconds"] == 10.0
    assert stable["cost"] == pytest.approx(130 / 1000 * 0.5)
    by_name = lines[("Support v1", None)]
    assert (by_name["requests"], by_name["tokens_per_s"]) == (1, 20.0)
    assert {s["version_name"]: sum(p["requests"] for p in s["points"]) for s in figures["series"]} == {
        "Support": 5, "Support v1": 1}
    assert figures["sampled"] is False


def test_no_price_means_no_cost(family, project, settings):
    settings.SERVING_PRICE_PER_1K_TOKENS = None
    base, _, alias = family
    generation(project, base, alias=alias)
    assert serving_metrics(base)["lines"][0]["cost"] is None


def test_the_api_answers_members_only_and_refuses_a_bad_window(client, family, project, scientist, outsider):
    base, _, alias = family
    generation(project, base, alias=alias)
    client.force_login(scientist)
    answer = client.get(f"/api/models/{base.pk}/serving-metrics/?hours=2&bucket_minutes=30")
    assert answer.status_code == 200 and answer.json()["lines"][0]["requests"] == 1
    for query, field in (("hours=0", "hours"), ("hours=abc", "hours"), ("hours=100000", "hours"),
                         ("bucket_minutes=-5", "bucket_minutes")):
        refused = client.get(f"/api/models/{base.pk}/serving-metrics/?{query}")
        assert refused.status_code == 400 and field in refused.content.decode(), query
    client.force_login(outsider)
    assert client.get(f"/api/models/{base.pk}/serving-metrics/").status_code == 404


def test_prometheus_gets_the_last_minutes_per_version_and_alias(family, project):
    base, v1, alias = family
    generation(project, base, alias=alias, total_s=2.0)
    generation(project, base, alias=alias, state="failed")
    generation(project, v1, alias=alias, total_s=1.0)
    generation(project, v1, alias=alias, total_s=1.0, ago_min=30)  # outside the 5 min window

    class Collector:
        def collect(self):
            return serving_families()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    samples = {(s.name, s.labels.get("version"), s.labels.get("alias"), s.labels.get("direction")): s.value
               for family_ in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family_.samples}
    assert samples[("workbench_serving_requests", "Support", "production", None)] == 2
    assert samples[("workbench_serving_errors", "Support", "production", None)] == 1
    assert samples[("workbench_serving_requests", "Support v1", "production", None)] == 1
    assert samples[("workbench_serving_latency_p99_seconds", "Support", "production", None)] == 2.0
    assert samples[("workbench_serving_tokens", "Support", "production", "out")] == 20


class ServingCollector:
    def collect(self):
        return serving_families()


@pytest.mark.timeout(60)
def test_prometheus_gets_the_generations_each_project_runs_now(project, other_project):
    from apps.serving import limits

    leases = [limits.acquire(project, None, slots=2, reserve=8), limits.acquire(other_project, None, slots=1, reserve=8)]

    def in_flight() -> dict[str, float]:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ServingCollector())
        return {s.labels["project"]: s.value for f in text_string_to_metric_families(generate_latest(registry).decode())
                for s in f.samples if s.name == "workbench_serving_in_flight"}

    assert in_flight() == {str(project.pk): 2, str(other_project.pk): 1}
    limits.release(leases[0], 10)
    assert in_flight() == {str(other_project.pk): 1}
    limits.release(leases[1], None)
    assert in_flight() == {}
