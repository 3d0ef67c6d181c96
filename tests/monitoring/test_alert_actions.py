"""Acknowledging and resolving alerts: site staff only (page, API), audited, and a failed-jobs
alert resolved by hand stays resolved until another job fails."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts import services as account_services
from apps.core.errors import Conflict, NotFound
from apps.monitoring import rules, services
from apps.monitoring.models import Alert
from apps.projects.models import AuditEvent
from tests.monitoring.conftest import failed_import_job, failed_training_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def thresholds(settings, clean_request_window):
    settings.ALERT_JOB_FAILED_WINDOW_MIN = 60
    settings.ALERT_WEBHOOK_URL = None


@pytest.fixture
def failed_jobs_alert(project, owner):
    failed_training_job(project, owner)
    services.alerts_evaluate()
    return Alert.objects.get(rule="job_failed")


def test_acknowledging_marks_who_and_keeps_the_alert_open_with_one_audit_event(staff, failed_jobs_alert):
    alert = services.alert_acknowledge(by=staff, alert=failed_jobs_alert, ip_address="10.0.0.7")
    assert alert.acknowledged_by == staff and alert.acknowledged_at is not None and alert.resolved_at is None
    services.alert_acknowledge(by=staff, alert=alert)  # again: nothing changes, nothing more is recorded
    [event] = AuditEvent.objects.filter(action="alert.acknowledge")
    assert event.actor == staff and event.target_id == str(alert.pk) and event.ip_address == "10.0.0.7"
    services.alerts_evaluate()  # the rule still fires: the acknowledged alert is refreshed, not replaced
    assert Alert.objects.get().acknowledged_by == staff


def test_a_resolved_alert_cannot_be_acknowledged(staff, failed_jobs_alert):
    services.alert_resolve(by=staff, alert=failed_jobs_alert)
    with pytest.raises(Conflict):
        services.alert_acknowledge(by=staff, alert=failed_jobs_alert)


@pytest.mark.parametrize("persona", ["owner", "admin", "viewer", "outsider"])
def test_project_members_cannot_acknowledge_or_resolve(persona, request, failed_jobs_alert):
    user = request.getfixturevalue(persona)
    for action in (services.alert_acknowledge, services.alert_resolve):
        with pytest.raises(NotFound):
            action(by=user, alert=failed_jobs_alert)
    alert = Alert.objects.get()
    assert alert.acknowledged_at is None and alert.resolved_at is None
    assert not AuditEvent.objects.filter(action__startswith="alert.").exists()


def test_resolving_failed_jobs_by_hand_holds_until_another_job_fails(staff, project, owner, failed_jobs_alert):
    alert = services.alert_resolve(by=staff, alert=failed_jobs_alert)
    assert alert.resolved_by == staff and AuditEvent.objects.filter(action="alert.resolve", actor=staff).count() == 1
    services.alerts_evaluate(now=timezone.now() + timedelta(seconds=1))
    assert not Alert.objects.filter(resolved_at__isnull=True).exists()  # the same failure opens nothing

    failed_import_job(project, owner, finished_at=timezone.now() + timedelta(seconds=2))
    outcome = services.alerts_evaluate(now=timezone.now() + timedelta(seconds=3))
    [reopened] = outcome.opened
    assert reopened.subject == rules.JOBS_SUBJECT
    assert reopened.message.startswith("1 job failed since the last alert was resolved")  # the import only
    assert "Line 3 is not JSON" in reopened.message


# --- API ------------------------------------------------------------------------------------

def test_staff_acknowledge_and_resolve_through_the_api(client, staff, failed_jobs_alert):
    client.force_login(staff)
    listed = client.get("/api/monitoring/alerts/").json()
    assert [a["id"] for a in listed["results"]] == [failed_jobs_alert.pk]
    response = client.post(f"/api/monitoring/alerts/{failed_jobs_alert.pk}/acknowledge/")
    assert response.status_code == 200
    assert response.json()["acknowledged_by"] == "stella" and response.json()["resolved_at"] is None
    response = client.post(f"/api/monitoring/alerts/{failed_jobs_alert.pk}/resolve/")
    assert response.status_code == 200 and response.json()["resolved_by"] == "stella"
    assert client.get("/api/monitoring/alerts/").json()["results"] == []
    assert [a["id"] for a in client.get("/api/monitoring/alerts/?state=resolved").json()["results"]] == [
        failed_jobs_alert.pk]
    assert client.post(f"/api/monitoring/alerts/{failed_jobs_alert.pk}/acknowledge/").status_code == 409
    assert client.post("/api/monitoring/alerts/999999/resolve/").status_code == 404


@pytest.mark.parametrize("persona", ["owner", "outsider"])
def test_the_api_answers_404_to_non_staff(client, persona, request, failed_jobs_alert):
    client.force_login(request.getfixturevalue(persona))
    assert client.get("/api/monitoring/alerts/").status_code == 404
    assert client.get("/api/monitoring/dashboard/").status_code == 404
    assert client.post(f"/api/monitoring/alerts/{failed_jobs_alert.pk}/acknowledge/").status_code == 404
    assert Alert.objects.get().acknowledged_at is None


def test_the_api_refuses_anonymous_callers(client, failed_jobs_alert):
    assert client.post(f"/api/monitoring/alerts/{failed_jobs_alert.pk}/resolve/").status_code in (401, 403)
    assert Alert.objects.get().resolved_at is None


def test_an_api_token_of_a_site_admin_does_not_reach_monitoring(client, site_admin, failed_jobs_alert):
    _, raw = account_services.token_create(user=site_admin, name="ci", permissions=["project.view"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert client.get("/api/monitoring/alerts/", **auth).status_code == 404
    assert client.post(f"/api/monitoring/alerts/{failed_jobs_alert.pk}/acknowledge/", **auth).status_code == 404
    assert Alert.objects.get().acknowledged_at is None


def test_the_dashboard_api_gives_tiles_alerts_and_history(client, staff, failed_jobs_alert, no_workers):
    client.force_login(staff)
    snapshot = client.get("/api/monitoring/dashboard/").json()
    assert snapshot["tiles"]["failures"] == 1 and snapshot["tiles"]["open_alerts"] == 1
    assert snapshot["tiles"]["unacknowledged_alerts"] == 1 and snapshot["tiles"]["workers_online"] == 0
    assert set(snapshot["tiles"]["queues"]) == {"default", "gpu", "inference"}
    assert [a["id"] for a in snapshot["alerts"]] == [failed_jobs_alert.pk]
    assert set(snapshot["history"]) == {"queues", "requests"}


# --- page forms (without JS) ------------------------------------------------------------------

def test_the_page_forms_acknowledge_and_resolve(client, staff, failed_jobs_alert, no_workers):
    client.force_login(staff)
    html = client.get("/monitoring/").content.decode()
    assert f'action="/monitoring/alerts/{failed_jobs_alert.pk}/acknowledge/"' in html
    response = client.post(f"/monitoring/alerts/{failed_jobs_alert.pk}/acknowledge/")
    assert response.status_code == 302 and response["Location"] == "/monitoring/"
    assert "by stella at" in client.get("/monitoring/").content.decode()
    client.post(f"/monitoring/alerts/{failed_jobs_alert.pk}/resolve/")
    assert Alert.objects.get().resolved_by == staff
    assert client.get(f"/monitoring/alerts/{failed_jobs_alert.pk}/resolve/").status_code == 405


def test_the_page_forms_answer_404_to_non_staff(client, owner, failed_jobs_alert):
    client.force_login(owner)
    assert client.post(f"/monitoring/alerts/{failed_jobs_alert.pk}/resolve/").status_code == 404
    assert Alert.objects.get().resolved_at is None
