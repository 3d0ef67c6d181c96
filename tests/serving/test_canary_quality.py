"""A canary's quality: the alias's calibrated pointwise judge (the scripted judge of
tests/evaluation/fixed_answer_server.py, its own process, the real OpenAI protocol, called
through provider_chat as a judge run's calls are) scores both versions' captured answers, and a
drop beyond the threshold rolls the canary back (audited, alerted); an equal score, a drop within
the threshold, or too few judged answers do not. And the bad input and permissions of the new
fields, each refusal naming its field."""

import json
from datetime import timedelta

import pytest

from apps.evaluation.canary_judging import judge_canaries, judge_canary_captures
from apps.evaluation.models import Judge
from apps.evaluation.services import judge_create
from apps.monitoring.models import Alert
from apps.monitoring.services import alerts_evaluate, alerts_notify
from apps.projects.models import AuditEvent, Membership, Role
from apps.providers.services import provider_policy_update
from apps.registry.models import ModelAlias
from apps.serving.canary import canary_check, canary_health
from apps.serving.captures import capture_generation
from apps.serving.models import Capture, Generation
from apps.serving.selectors import serving_metrics
from tests.comparison.factories import placeholder_model
from tests.conftest import wait_for
from tests.evaluation.fixtures import calibrate, judge_provider_fixture, scripted_judge_fixture  # noqa: F401
from tests.factories import UserFactory
from tests.monitoring.test_alerts import Receiver
from tests.serving.fixtures import alias_family_fixture, ready  # noqa: F401

POINTWISE = {"kind": "pointwise", "criteria": [{"name": "correct", "scale": "pass_fail"}]}
PAIRWISE = {"kind": "pairwise", "criteria": [{"name": "helpfulness"}]}
QUESTION = "What is the capital of France?"
GOOD, BAD = "The capital of France is Paris.", "I do not know, sorry."


def put_canary(client, model, body, alias="production"):
    return client.put(f"/api/models/{model.pk}/aliases/{alias}/canary/", body, content_type="application/json")


def local_judge(project, name="Points", rubric=POINTWISE) -> Judge:
    return Judge.objects.create(project=project, name=name, rubric=rubric, local_model=placeholder_model(project))


def answered(alias, version, n, output):
    """n /v1 answers of `version` through the alias, captured as request logging captures them."""
    for _ in range(n):
        generation = Generation.objects.create(
            project=alias.project, model=version, alias=alias, source="api", params={}, state="succeeded",
            messages=[{"role": "user", "content": QUESTION}], output=output, total_s=0.2)
        assert capture_generation(generation) is not None


def scores(correct):
    return {"content": json.dumps({"correct": {"score": correct, "reason": "scripted"}})}


@pytest.fixture(name="provider_judge")
def provider_judge_fixture(project, owner, scientist, judge_provider, scripted_judge, family):
    """The scripted judge as a calibrated pointwise provider judge; production logs its traffic."""
    judge = judge_create(user=scientist, project=project, name="Correctness", rubric=POINTWISE,
                         provider_model="Scripted/judge-1", max_tokens=64)
    calibrate(judge, owner)
    scripted_judge.script([{"pattern": "Paris", **scores("pass")}, {"pattern": "do not know", **scores("fail")},
                           {"pattern": "garbled", "content": "a fine answer, I'd say"}])
    ModelAlias.objects.filter(pk=family[2].pk).update(capture_enabled=True)
    return judge


def start(client, family, judge, **thresholds):
    base, v1, alias = family
    started = put_canary(client, base, alias=alias.name, body={"version": v1.pk, "weight": 50, "quality_judge": judge.pk,
                                        "max_quality_drop": 0.3, "min_requests": 3, **thresholds})
    assert started.status_code == 200, started.content
    alias.refresh_from_db()
    return started.json()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_a_quality_drop_past_the_threshold_rolls_the_canary_back_audited_and_alerted(
        client, family, project, scientist, provider_judge, scripted_judge, settings):
    base, v1, alias = family
    client.force_login(scientist)
    body = start(client, family, provider_judge)
    assert (body["quality_judge"], body["max_quality_drop"]) == (provider_judge.pk, 0.3)
    assert body["health"]["canary"]["judged"] == 0 and body["health"]["canary"]["quality"] is None
    answered(alias, base, 3, GOOD)
    answered(alias, v1, 3, BAD)
    Capture.objects.filter(alias=alias, version=v1).update(created_at=alias.canary_started_at - timedelta(seconds=1))
    answered(alias, v1, 3, BAD)  # only what the canary served since it started is judged

    assert judge_canaries() == 6
    assert len(scripted_judge.requests()) == 6
    assert {r["model"] for r in scripted_judge.requests()} == {"judge-1"}
    health = canary_health(alias)
    assert (health["canary"]["judged"], health["canary"]["quality"]) == (3, 0.0)
    assert (health["stable"]["judged"], health["stable"]["quality"]) == (3, 1.0)
    assert health["breach"].startswith("quality: the judge's mean score 0.000 over 3 answers is 1.000 below")
    assert judge_canaries() == 0  # nothing new: nothing asked again
    assert len(scripted_judge.requests()) == 6

    assert canary_check(alias.pk) == "rolled_back"
    alias.refresh_from_db()
    assert (alias.version_id, alias.canary_version_id, alias.canary_weight) == (base.pk, None, 0)
    rollback = AuditEvent.objects.get(project=project, action="model.alias_rollback")
    assert rollback.actor is None and rollback.after["reason"].startswith("quality:")
    assert rollback.before["quality_judge"] == provider_judge.pk and rollback.before["max_quality_drop"] == 0.3
    alerts_evaluate()
    alert = Alert.objects.get(rule=Alert.Rule.CANARY_ROLLED_BACK, resolved_at__isnull=True)
    assert alert.subject == f"model-alias:{alias.pk}" and "quality: the judge's mean score 0.000" in alert.message
    with Receiver() as receiver:  # the operator's webhook is told
        settings.ALERT_WEBHOOK_URL = receiver.url
        assert alerts_notify() == 1
    [post] = receiver.received
    assert post["body"]["rule"] == "canary_rolled_back" and "quality: the judge's mean score" in post["body"]["message"]

    # The model's serving figures carry each version's judged quality beside its errors and latency.
    lines = {(line["version"], line["alias"]): line for line in serving_metrics(base)["lines"]}
    assert (lines[(base.pk, "production")]["quality"], lines[(base.pk, "production")]["judged"]) == (1.0, 3)
    assert (lines[(v1.pk, "production")]["quality"], lines[(v1.pk, "production")]["judged"]) == (0.0, 3)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_equal_quality_or_a_drop_within_the_threshold_keeps_the_canary_and_unreadable_verdicts_count_apart(
        client, family, scientist, provider_judge, scripted_judge):
    base, v1, alias = family
    client.force_login(scientist)
    start(client, family, provider_judge)
    answered(alias, base, 4, GOOD)
    answered(alias, v1, 4, GOOD)
    assert judge_canaries() == 8
    health = canary_health(alias)
    assert health["canary"]["quality"] == health["stable"]["quality"] == 1.0 and health["breach"] is None
    assert canary_check(alias.pk) is None

    answered(alias, v1, 2, BAD)  # canary: 4 of 6 pass, 0.667; a drop of 0.333 is past 0.3
    answered(alias, v1, 1, "garbled")  # the judge's answer is unreadable: no score, counted apart
    answered(alias, v1, 2, GOOD)  # 6 of 8: 0.75, a drop of 0.25 within 0.3
    assert judge_canaries() == 5
    health = canary_health(alias)
    assert health["canary"] == {**health["canary"], "judged": 8, "unreadable": 1, "quality": 0.75}
    unreadable = Capture.objects.get(alias=alias, response="garbled")
    assert unreadable.judge_score is None and unreadable.judge_error and unreadable.judged_by == provider_judge
    assert health["breach"] is None and canary_check(alias.pk) is None
    alias.refresh_from_db()
    assert alias.canary_version_id == v1.pk and not AuditEvent.objects.filter(action="model.alias_rollback").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_too_few_judged_answers_on_either_side_decide_nothing_and_a_tick_judges_a_bounded_batch(
        client, family, scientist, provider_judge, scripted_judge):
    base, v1, alias = family
    client.force_login(scientist)
    start(client, family, provider_judge, min_requests=4)
    answered(alias, v1, 5, BAD)
    answered(alias, base, 3, GOOD)
    assert judge_canary_captures(alias.pk, batch=2) == 4  # two of each side a tick
    assert judge_canary_captures(alias.pk, batch=2) == 3  # the stable side has one left
    assert judge_canary_captures(alias.pk, batch=2) == 1
    health = canary_health(alias)
    assert (health["canary"]["judged"], health["stable"]["judged"]) == (5, 3)  # 3 < min_requests on the stable side
    assert health["canary"]["quality"] == 0.0 and health["breach"] is None
    assert canary_check(alias.pk) is None
    answered(alias, base, 1, GOOD)
    judge_canaries()
    assert canary_check(alias.pk) == "rolled_back"


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_answers_a_provider_judge_was_refused_for_wait_for_the_next_tick(
        client, family, project, owner, scientist, provider_judge, scripted_judge):
    base, v1, alias = family
    client.force_login(scientist)
    start(client, family, provider_judge)
    answered(alias, v1, 2, GOOD)
    provider_policy_update(user=owner, project=project, allow_outside_providers=False)  # nothing may leave now
    assert judge_canaries() == 0
    assert scripted_judge.requests() == [] and not Capture.objects.filter(judged_by__isnull=False).exists()
    provider_policy_update(user=owner, project=project, allow_outside_providers=True)
    assert judge_canaries() == 2 and len(scripted_judge.requests()) == 2


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "field", "says"), [
    ({"max_quality_drop": 1.5}, "max_quality_drop", "from 0 to 1"),
    ({"max_quality_drop": -0.1}, "max_quality_drop", "from 0 to 1"),
    ({"max_quality_drop": "lots"}, "max_quality_drop", ""),
    ({"max_quality_drop": None}, "max_quality_drop", "from 0 to 1"),
    ({"quality_judge": "the good one"}, "quality_judge", ""),
    ({"quality_judge": None}, "quality_judge", "needs a quality_judge"),
    ({"quality_judge": 10**9}, "quality_judge", "not a judge of this project"),
    ({"quality_judge": "theirs"}, "quality_judge", "not a judge of this project"),
    ({"quality_judge": "pairwise"}, "quality_judge", "needs a pointwise judge"),
    ({"quality_judge": "uncalibrated"}, "quality_judge", "is not calibrated (no finished run"),
    ({"capture": False}, "quality_judge", "turn its request logging on first"),
])
def test_bad_quality_settings_are_refused_naming_the_field_and_change_nothing(
        client, family, project, other_project, owner, scientist, body, field, says):
    base, v1, alias = family
    ModelAlias.objects.filter(pk=alias.pk).update(capture_enabled=body.pop("capture", True))
    good = local_judge(project)
    calibrate(good, owner)
    judges = {"theirs": local_judge(other_project, "Theirs").pk, "pairwise": local_judge(project, "Pairs", PAIRWISE).pk,
              "uncalibrated": local_judge(project, "Fresh").pk}
    body = {"version": v1.pk, "weight": 10, "quality_judge": good.pk, "max_quality_drop": 0.1, **body}
    body["quality_judge"] = judges.get(body["quality_judge"], body["quality_judge"])
    client.force_login(scientist)
    refused = put_canary(client, base, body)
    assert refused.status_code == 400, refused.content
    answer = refused.json()  # the service's refusal names its field; the serializer's is keyed by it
    assert answer.get("field") == field or list(answer) == [field], answer
    assert says in json.dumps(answer, ensure_ascii=False)
    alias.refresh_from_db()
    assert alias.canary_version_id is None and alias.quality_judge_id is None
    assert not AuditEvent.objects.filter(action="model.alias_canary").exists()


@pytest.mark.django_db
def test_a_quality_judge_needs_compare_run_and_a_provider_judge_provider_use(
        client, family, project, owner, judge_provider, scripted_judge):
    base, v1, alias = family
    ModelAlias.objects.filter(pk=alias.pk).update(capture_enabled=True)
    local = local_judge(project)
    calibrate(local, owner)
    outside = judge_create(user=owner, project=project, name="Outside", rubric=POINTWISE,
                           provider_model="Scripted/judge-1", max_tokens=64)
    calibrate(outside, owner)

    def member(name, permissions):
        role = Role.objects.create(project=project, name=name, created_by=owner,
                                   permissions=["project.view", "model.view", *permissions])
        user = UserFactory(username=name.lower())
        Membership.objects.create(project=project, user=user, custom_role=role)
        return user

    body = {"version": v1.pk, "weight": 10, "max_quality_drop": 0.1}
    client.force_login(member("Aliaser", ["model.alias"]))
    assert put_canary(client, base, {"version": v1.pk, "weight": 10}).status_code == 200  # no judge: as before
    refused = put_canary(client, base, {**body, "quality_judge": local.pk})
    assert refused.status_code == 403 and refused.json()["missing_permission"] == "compare.run"
    client.force_login(member("Runner", ["model.alias", "compare.run"]))
    assert put_canary(client, base, {**body, "quality_judge": local.pk}).status_code == 200
    refused = put_canary(client, base, {**body, "quality_judge": outside.pk})
    assert refused.status_code == 403 and refused.json()["missing_permission"] == "provider.use"
    alias.refresh_from_db()
    assert alias.quality_judge_id == local.pk
    client.force_login(member("Caller", ["model.alias", "compare.run", "provider.use"]))
    assert put_canary(client, base, {**body, "quality_judge": outside.pk}).status_code == 200
    alias.refresh_from_db()
    assert alias.quality_judge_id == outside.pk and alias.canary_started_by.username == "caller"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_beat_task_runs_on_an_inference_worker_and_a_local_judge_answers_through_its_batcher(
        client, family, project, owner, scientist, tiny_model, inference_worker):
    from django.conf import settings

    from workbench.celery import app

    base, v1, alias = family
    ModelAlias.objects.filter(pk=alias.pk).update(capture_enabled=True)
    judge = Judge.objects.create(project=project, name="Local", rubric=POINTWISE, local_model=tiny_model, max_tokens=8)
    calibrate(judge, owner)
    client.force_login(scientist)
    start(client, family, judge, min_requests=2)
    answered(alias, base, 2, GOOD)
    answered(alias, v1, 2, BAD)
    # An alias judged first whose judge cannot load its model: logged, and production is judged all the same.
    broken = Judge.objects.create(project=project, name="Broken", rubric=POINTWISE, max_tokens=8,
                                  local_model=placeholder_model(project, "Gone"))
    calibrate(broken, owner)
    beta = ModelAlias.objects.create(project=project, model=base, version=base, name="beta", capture_enabled=True)
    start(client, (base, v1, beta), broken, min_requests=2)
    answered(beta, v1, 1, BAD)
    entry = settings.CELERY_BEAT_SCHEDULE["evaluation-canary-judge"]
    app.send_task(entry["task"], **entry["options"])  # what beat sends every CANARY_JUDGE_INTERVAL_S
    wait_for(lambda: Capture.objects.filter(alias=alias, judged_by=judge).count() == 4, timeout=180, interval=0.5,
             what="the inference worker to judge the four answers")
    # The tiny random model writes no JSON: each verdict is kept unreadable, with why, and decides nothing.
    assert all(c.judge_score is None and c.judge_error for c in Capture.objects.filter(alias=alias))
    assert not Capture.objects.filter(alias=beta, judged_by__isnull=False).exists()
    health = canary_health(alias)
    assert (health["canary"]["judged"], health["canary"]["unreadable"], health["canary"]["quality"]) == (0, 2, None)
    assert health["breach"] is None and canary_check(alias.pk) is None
