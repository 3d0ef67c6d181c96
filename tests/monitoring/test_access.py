"""Monitoring is operator data across projects: site staff see it, everyone else gets 404 (page
and /metrics alike); /metrics also answers a Prometheus scraper holding METRICS_TOKEN."""

import pytest

pytestmark = pytest.mark.django_db

TOKEN = "scrape-" + "s3cr3t" * 6
MEMBERS = ["owner", "admin", "scientist", "annotator", "viewer", "outsider"]


@pytest.mark.parametrize("persona", MEMBERS)
def test_project_members_of_every_role_get_404_on_the_monitoring_page(client, persona, request, no_workers):
    client.force_login(request.getfixturevalue(persona))
    response = client.get("/monitoring/")
    assert response.status_code == 404
    assert "Workers" not in response.content.decode()


def test_anonymous_visitor_gets_404_on_the_monitoring_page_not_a_login_hint(client):
    assert client.get("/monitoring/").status_code == 404


@pytest.mark.parametrize("persona", ["staff", "site_admin"])
def test_site_staff_see_the_monitoring_page(client, persona, request, no_workers):
    client.force_login(request.getfixturevalue(persona))
    response = client.get("/monitoring/")
    assert response.status_code == 200
    html = response.content.decode()
    for heading in ("Open alerts", "Workers", "Queues", "Recent failures", "Web requests"):
        assert heading in html


def test_staff_whose_account_was_deactivated_get_404(client, staff, no_workers):
    client.force_login(staff)
    staff.is_active = False
    staff.save()
    assert client.get("/monitoring/").status_code == 404


def test_the_monitoring_page_takes_no_writes(client, staff, no_workers):
    client.force_login(staff)
    assert client.post("/monitoring/").status_code == 405


def test_metrics_refuse_anonymous_visitors_with_404(client, settings):
    settings.METRICS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 404


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN, "Bearer wrong"])
def test_metrics_refuse_a_wrong_token_with_404(client, settings, header):
    settings.METRICS_TOKEN = TOKEN
    assert client.get("/metrics", HTTP_AUTHORIZATION=header).status_code == 404


def test_metrics_answer_the_configured_bearer_token(client, settings, no_workers):
    settings.METRICS_TOKEN = TOKEN
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"workbench_training_jobs" in response.content


def test_without_a_configured_token_no_bearer_token_opens_metrics(client, settings):
    settings.METRICS_TOKEN = None
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer None").status_code == 404


@pytest.mark.parametrize("token", [None, TOKEN])
def test_metrics_answer_a_staff_session(client, settings, staff, no_workers, token):
    settings.METRICS_TOKEN = token
    client.force_login(staff)
    assert client.get("/metrics").status_code == 200


def test_metrics_refuse_a_project_owner_session(client, settings, owner):
    settings.METRICS_TOKEN = TOKEN
    client.force_login(owner)
    assert client.get("/metrics").status_code == 404
