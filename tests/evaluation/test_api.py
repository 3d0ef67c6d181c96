"""The judges API without a worker: every bad input refused with its field named, nothing made;
what a run would cost; cancelling a queued run; a judge in use cannot be deleted."""

import json

import pytest

from apps.comparison.models import Comparison
from apps.evaluation.models import Judge, JudgeRun
from tests.comparison.factories import make_comparison, placeholder_model

pytestmark = pytest.mark.django_db

RUBRIC = {"kind": "pairwise", "criteria": [{"name": "helpfulness", "description": "answers the question"}]}


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.fixture
def comparison(project, owner):
    return make_comparison(project, owner)


@pytest.fixture
def judge(client, scientist, project, comparison):
    client.force_login(scientist)
    made = post(client, f"/api/projects/{project.pk}/judges/",
                {"name": "Local judge", "rubric": RUBRIC, "local_model": comparison.contestants.first().model_id})
    assert made.status_code == 201, made.content
    return made.json()


@pytest.mark.parametrize("change, field", [
    ({"rubric": {"kind": "pointwise", "criteria": []}}, "rubric.criteria"),
    ({"rubric": {"kind": "pointwise"}}, "rubric.criteria"),
    ({"rubric": {"kind": "ranking", "criteria": [{"name": "x"}]}}, "rubric.kind"),
    ({"rubric": {"kind": "pointwise", "criteria": [{"name": "x", "scale": "1-10"}]}}, "rubric.criteria[0].scale"),
    ({"rubric": {"kind": "pointwise", "criteria": [{"name": "<b>"}]}}, "rubric.criteria[0].name"),
    ({"rubric": "be nice"}, "rubric"),
    ({"local_model": None}, "local_model"),
    ({"provider_model": "Nowhere/model"}, "provider_model"),  # given with local_model: exactly one
    ({"local_model": 999999}, "local_model"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"name": "   "}, "name"),
])
def test_bad_judges_are_refused_naming_the_field(client, scientist, project, comparison, change, field):
    client.force_login(scientist)
    body = {"name": "J", "rubric": RUBRIC, "local_model": comparison.contestants.first().model_id, **change}
    refused = post(client, f"/api/projects/{project.pk}/judges/", body)
    assert refused.status_code == 400, refused.content
    body = refused.json()  # a domain refusal names `field`; the serializer's own keys the error by it
    assert body.get("field") == field or list(body) == [field], body
    assert not Judge.objects.exists()


def test_a_provider_model_not_enabled_for_the_project_is_refused(client, scientist, project):
    client.force_login(scientist)
    refused = post(client, f"/api/projects/{project.pk}/judges/",
                   {"name": "J", "rubric": RUBRIC, "provider_model": "Nowhere/model"})
    assert refused.status_code == 400 and refused.json()["field"] == "provider_model"


def test_another_projects_model_and_a_repeated_name_are_refused(client, scientist, project, other_project, judge,
                                                              comparison):
    url = f"/api/projects/{project.pk}/judges/"
    elsewhere = post(client, url, {"name": "J2", "rubric": RUBRIC, "local_model": placeholder_model(other_project).pk})
    assert elsewhere.status_code == 400 and elsewhere.json()["field"] == "local_model"
    again = post(client, url, {"name": "Local judge", "rubric": RUBRIC,
                               "local_model": comparison.contestants.first().model_id})
    assert again.status_code == 400 and again.json()["field"] == "name"


def test_the_cost_is_shown_before_launch(client, project, judge, comparison):
    estimate = post(client, f"/api/projects/{project.pk}/judges/{judge['id']}/estimate/",
                    {"comparison": comparison.pk})
    assert estimate.status_code == 200
    # 3 prompts, 2 models: one pair a prompt, asked in both orders; 256 answer tokens at most a call.
    assert estimate.json()["calls"] == 6 and estimate.json()["items"] == 3
    assert estimate.json()["max_completion_tokens"] == 6 * 256 and estimate.json()["prompt_tokens"] > 0
    assert not JudgeRun.objects.exists()


def test_a_comparison_still_running_or_of_another_project_cannot_be_judged(client, project, owner, other_project,
                                                                          judge, comparison):
    url = f"/api/projects/{project.pk}/judges/{judge['id']}/runs/"
    Comparison.objects.filter(pk=comparison.pk).update(state="running")
    running = post(client, url, {"comparison": comparison.pk})
    assert running.status_code == 409 and "running" in running.json()["detail"]
    other = make_comparison(other_project, owner)
    elsewhere = post(client, url, {"comparison": other.pk})
    assert elsewhere.status_code == 400 and elsewhere.json()["field"] == "comparison"
    assert not JudgeRun.objects.exists()


def test_a_queued_run_is_cancelled_at_once_and_its_judge_cannot_be_deleted_while_it_runs(client, project, judge,
                                                                                         comparison):
    launched = post(client, f"/api/projects/{project.pk}/judges/{judge['id']}/runs/", {"comparison": comparison.pk})
    assert launched.status_code == 201 and launched.json()["calls_total"] == 6
    deleting = client.delete(f"/api/projects/{project.pk}/judges/{judge['id']}/")
    assert deleting.status_code == 409
    url = f"/api/projects/{project.pk}/judge-runs/{launched.json()['id']}/cancel/"
    assert post(client, url, {}).json()["state"] == "cancelled"
    assert post(client, url, {}).status_code == 409
    assert client.delete(f"/api/projects/{project.pk}/judges/{judge['id']}/").status_code == 204


@pytest.mark.parametrize("body, field", [
    ({"min_kappa": 1.5}, "min_kappa"),
    ({"min_kappa": "high"}, "min_kappa"),
    ({"min_kappa": True}, "min_kappa"),
    ({"min_correlation": -1.5}, "min_correlation"),
    ({"min_correlation": "0.6"}, "min_correlation"),
    ({"min_items": 0}, "min_items"),
    ({"min_items": 2.5}, "min_items"),
    ({"min_agreement": 0.5}, "min_agreement"),
    ([0.5], "body"),
])
def test_a_bad_calibration_threshold_is_refused_naming_the_field_and_nothing_changes(client, owner, project, body,
                                                                                       field):
    client.force_login(owner)
    url = f"/api/projects/{project.pk}/judge-calibration/"
    defaults = {"min_kappa": 0.6, "min_correlation": 0.6, "min_items": 20}
    assert client.get(url).json() == defaults
    refused = client.patch(url, json.dumps(body), content_type="application/json")
    assert refused.status_code == 400 and refused.json()["field"] == field, refused.content
    assert client.get(url).json() == defaults


def test_another_projects_calibration_threshold_answers_404(client, owner, other_project):
    client.force_login(owner)
    url = f"/api/projects/{other_project.pk}/judge-calibration/"
    assert client.get(url).status_code == 404
    assert client.patch(url, {"min_kappa": 0.1}, content_type="application/json").status_code == 404
