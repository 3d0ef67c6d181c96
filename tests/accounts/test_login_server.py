"""The login lockout and the audit log's address through the real web server (uvicorn with the
options it ships with, workbench.server), from loopback: the address the server hands Django
must be the connection's, whatever `X-Forwarded-For` a client sends."""

import re

import pytest
import requests

from apps.projects.models import AuditEvent
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.timeout(60)


def login(base_url: str, username: str, password: str, forwarded_for: str) -> requests.Response:
    session = requests.Session()
    page = session.get(f"{base_url}/accounts/login/", timeout=10)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return session.post(f"{base_url}/accounts/login/", timeout=10, allow_redirects=False,
                        data={"username": username, "password": password, "csrfmiddlewaretoken": csrf},
                        headers={"Referer": f"{base_url}/accounts/login/", "X-Forwarded-For": forwarded_for})


@pytest.mark.smoke
def test_a_fresh_forwarded_for_per_try_from_loopback_neither_escapes_nor_lifts_the_lockout(live_asgi):
    UserFactory(username="alice")
    answers = [login(live_asgi, "alice", "wrong", f"203.0.113.{attempt}").status_code for attempt in range(5)]
    assert answers == [200, 200, 200, 200, 429]  # the fifth failure locks alice out at this address
    locked = login(live_asgi, "alice", PASSWORD, "198.51.100.77")
    assert locked.status_code == 429
    assert "Too many failed logins" in locked.text


def test_the_audit_log_records_the_connection_address_not_a_forged_header(live_asgi, owner, project):
    session = requests.Session()
    page = session.get(f"{live_asgi}/accounts/login/", timeout=10)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    session.post(f"{live_asgi}/accounts/login/", timeout=10,
                 data={"username": owner.username, "password": PASSWORD, "csrfmiddlewaretoken": csrf},
                 headers={"Referer": f"{live_asgi}/accounts/login/"})
    answer = session.patch(f"{live_asgi}/api/projects/{project.pk}/", json={"description": "Audited"}, timeout=10,
                           headers={"X-CSRFToken": session.cookies["csrftoken"], "Referer": f"{live_asgi}/",
                                    "X-Forwarded-For": "203.0.113.9"})
    assert answer.status_code == 200, answer.text
    event = AuditEvent.objects.filter(project=project, action="project.update").latest("id")
    assert event.ip_address == "127.0.0.1"
