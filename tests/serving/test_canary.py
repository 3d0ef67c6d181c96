"""Canary rollouts of an alias: the sticky split, the thresholds judged from what each version
served, the automatic rollback (audited, alerted), the steps and the promotion, and the bad input
a rollout is refused for, each naming its field."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.monitoring.models import Alert
from apps.monitoring.services import alerts_evaluate
from apps.projects.models import AuditEvent
from apps.registry.models import ModelAlias
from apps.registry.selectors import canary_serves, resolve_served
from apps.serving.canary import canary_check, canary_check_all, canary_health, percentile
from apps.serving.models import Generation
from tests.serving.fixtures import alias_family_fixture, ready  # noqa: F401

pytestmark = pytest.mark.django_db



def put_canary(client, model, body, alias="production"):
    return client.put(f"/api/models/{model.pk}/aliases/{alias}/canary/", body, content_type="application/json")


def served(alias, version, *, n, state="succeeded", total_s=0.1):
    for _ in range(n):
        Generation.objects.create(project=alias.project, model=version, alias=alias, source="api", params={},
                                  state=state, total_s=total_s if state == "succeeded" else None)


def test_the_split_is_sticky_per_caller_near_its_weight_and_a_step_up_only_adds_callers(family):
    _, v1, alias = family
    alias.canary_version, alias.canary_weight = v1, 30
    callers = [f"user:{i}" for i in range(10_000)]  # the share within 3 points: > 6 standard deviations
    at_30 = {c for c in callers if canary_serves(alias, c)}
    assert 0.27 < len(at_30) / len(callers) < 0.33, alias.pk
    assert at_30 == {c for c in callers if canary_serves(alias, c)}  # the same caller, the same side
    alias.canary_weight = 60
    at_60 = {c for c in callers if canary_serves(alias, c)}
    assert at_30 < at_60 and 0.57 < len(at_60) / len(callers) < 0.63, alias.pk
    alias.canary_weight = 0
    assert not any(canary_serves(alias, c) for c in callers)


def test_a_canary_is_started_through_the_api_and_resolution_follows_it(client, family, project, scientist):
    base, v1, alias = family
    client.force_login(scientist)
    started = put_canary(client, base, {"version": v1.pk, "weight": 25, "steps": [50, 100], "interval_s": 60,
                                        "max_error_rate": 0.05, "max_p99_latency_s": 2.5, "min_requests": 10})
    assert started.status_code == 200, started.content
    body = started.json()
    assert (body["canary_version"], body["canary_weight"], body["rollout_steps"]) == (v1.pk, 25, [50, 100])
    assert body["health"]["canary"]["requests"] == 0 and body["health"]["breach"] is None
    alias.refresh_from_db()
    sides = {resolve_served(scientist, project, "Support", caller=f"user:{i}")[0].pk for i in range(200)}
    assert sides == {base.pk, v1.pk}
    version, served_alias = resolve_served(scientist, project, "Support@production", caller="user:7")
    assert served_alias == alias and version.pk == (v1.pk if canary_serves(alias, "user:7") else base.pk)
    event = AuditEvent.objects.get(project=project, action="model.alias_canary")
    assert event.actor == scientist and event.after["canary_weight"] == 25


def test_a_breach_rolls_the_canary_back_audited_and_alerted(client, family, project, scientist):
    base, v1, alias = family
    client.force_login(scientist)
    assert put_canary(client, base, {"version": v1.pk, "weight": 50, "max_error_rate": 0.2,
                                     "min_requests": 5}).status_code == 200
    alias.refresh_from_db()
    served(alias, base, n=10, state="failed")  # the stable side's failures do not count against the canary
    served(alias, v1, n=3, state="failed")
    assert canary_check(alias.pk) is None  # 3 requests: below min_requests, nothing judged yet
    served(alias, v1, n=2)
    health = canary_health(alias)
    assert health["canary"] == {"version": v1.pk, "requests": 5, "errors": 3, "error_rate": 0.6,
                                "p99_latency_s": 0.1}
    assert health["stable"]["errors"] == 10 and "error rate 60.0%" in health["breach"]
    assert canary_check(alias.pk) == "rolled_back"
    alias.refresh_from_db()
    assert (alias.version_id, alias.canary_version_id, alias.canary_weight) == (base.pk, None, 0)
    assert {resolve_served(scientist, project, "Support", caller=f"user:{i}")[0].pk for i in range(50)} == {base.pk}
    rollback = AuditEvent.objects.get(project=project, action="model.alias_rollback")
    assert rollback.actor is None and "error rate 60.0%" in rollback.after["reason"]
    assert rollback.before["canary_version"] == v1.pk
    alerts_evaluate()
    alert = Alert.objects.get(rule=Alert.Rule.CANARY_ROLLED_BACK, resolved_at__isnull=True)
    assert alert.subject == f"model-alias:{alias.pk}" and "Support@production" in alert.message
    assert "error rate 60.0%" in alert.message


def test_a_latency_breach_is_judged_on_the_canary_p99(family, client, scientist):
    base, v1, alias = family
    client.force_login(scientist)
    assert put_canary(client, base, {"version": v1.pk, "weight": 10, "max_p99_latency_s": 1.0,
                                     "min_requests": 100}).status_code == 200
    alias.refresh_from_db()
    served(alias, v1, n=98, total_s=0.2)
    served(alias, v1, n=2, total_s=3.0)  # 2 slow of 100: the p99 (the 99th value) is slow
    assert canary_health(alias)["canary"]["p99_latency_s"] == 3.0
    assert canary_check(alias.pk) == "rolled_back"


def test_steps_are_taken_on_schedule_while_healthy_and_the_last_promotes(family, client, project, scientist):
    base, v1, alias = family
    client.force_login(scientist)
    assert put_canary(client, base, {"version": v1.pk, "weight": 10, "steps": [40, 100], "interval_s": 30,
                                     "max_error_rate": 0.5}).status_code == 200
    assert canary_check_all() == {}  # not yet due
    ModelAlias.objects.filter(pk=alias.pk).update(canary_stepped_at=timezone.now() - timedelta(seconds=31))
    assert canary_check_all() == {"stepped": 1}
    alias.refresh_from_db()
    assert (alias.canary_weight, alias.rollout_steps) == (40, [100])
    ModelAlias.objects.filter(pk=alias.pk).update(canary_stepped_at=timezone.now() - timedelta(seconds=31))
    assert canary_check(alias.pk) == "promoted"
    alias.refresh_from_db()
    assert (alias.version_id, alias.canary_version_id) == (v1.pk, None)
    assert list(AuditEvent.objects.filter(project=project, action__startswith="model.alias_")
                .order_by("id").values_list("action", flat=True)) == [
        "model.alias_canary", "model.alias_canary_step", "model.alias_promote"]


def test_moving_the_alias_by_hand_ends_its_rollout(family, client, scientist):
    base, v1, alias = family
    client.force_login(scientist)
    assert put_canary(client, base, {"version": v1.pk, "weight": 10}).status_code == 200
    moved = client.put(f"/api/models/{base.pk}/aliases/production/", {"version": v1.pk},
                       content_type="application/json")
    assert moved.status_code == 200
    alias.refresh_from_db()
    assert (alias.version_id, alias.canary_version_id, alias.canary_weight) == (v1.pk, None, 0)


def test_a_rollback_by_hand(family, client, scientist):
    base, v1, alias = family
    client.force_login(scientist)
    assert client.delete(f"/api/models/{base.pk}/aliases/production/canary/").status_code == 409  # none running
    assert put_canary(client, base, {"version": v1.pk, "weight": 10}).status_code == 200
    stopped = client.delete(f"/api/models/{base.pk}/aliases/production/canary/")
    assert stopped.status_code == 200 and stopped.json()["canary_version"] is None
    assert AuditEvent.objects.get(action="model.alias_rollback").after["reason"] == "rolled back by hand"


@pytest.mark.parametrize(("body", "field"), [
    ({"weight": 10}, "version"),
    ({"weight": 0}, "weight"),
    ({"weight": 100}, "weight"),  # the two sides sum to 100: the canary cannot take it all at once
    ({"weight": 150}, "weight"),
    ({"weight": "ten"}, "weight"),
    ({"weight": 10, "steps": [5, 100]}, "steps"),
    ({"weight": 10, "steps": [50, 40, 100]}, "steps"),
    ({"weight": 10, "steps": [50]}, "steps"),
    ({"weight": 10, "steps": "50,100"}, "steps"),
    ({"weight": 10, "steps": [100], "interval_s": 0}, "interval_s"),
    ({"weight": 10, "interval_s": -1}, "interval_s"),
    ({"weight": 10, "max_error_rate": 1.5}, "max_error_rate"),
    ({"weight": 10, "max_p99_latency_s": 0}, "max_p99_latency_s"),
    ({"weight": 10, "min_requests": 0}, "min_requests"),
])
def test_bad_rollouts_are_refused_naming_the_field_and_change_nothing(family, client, scientist, body, field):
    base, v1, alias = family
    client.force_login(scientist)
    if field != "version":
        body = {"version": v1.pk, **body}
    refused = put_canary(client, base, body)
    assert refused.status_code == 400, refused.content
    assert field in refused.content.decode()
    alias.refresh_from_db()
    assert alias.canary_version_id is None and not AuditEvent.objects.filter(action="model.alias_canary").exists()


def test_a_canary_cannot_be_another_projects_model_or_the_alias_own_version(family, client, scientist, other_project):
    base, v1, alias = family
    client.force_login(scientist)
    elsewhere = ready(other_project, "Theirs")
    refused = put_canary(client, base, {"version": elsewhere.pk, "weight": 10})
    assert refused.status_code == 400 and "version" in refused.content.decode()
    same = put_canary(client, base, {"version": base.pk, "weight": 10})
    assert same.status_code == 400 and "already serves" in same.content.decode()
    assert put_canary(client, base, {"version": v1.pk, "weight": 10}, alias="staging").status_code == 404


def test_percentile_is_nearest_rank():
    assert percentile([], 0.99) is None
    assert percentile([1.0], 0.99) == 1.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0
    assert percentile([float(i) for i in range(1, 11)], 0.5) == 5.0
    assert percentile([float(i) for i in range(1, 11)], 0.99) == 10.0
