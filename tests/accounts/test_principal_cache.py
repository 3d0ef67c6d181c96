"""API tokens, session users and project permissions are kept across requests by each web process
(apps/core/principal_cache.py); a change to any of them reaches every process at its next request.

Through the real server with two worker processes (uvicorn with the shipped flags): each check is
asked several times, so both processes have answered from what they kept before the change."""

import re
import subprocess
import sys

import pytest
import requests
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.accounts import services as account_services
from apps.core.principal_cache import GENERATION_KEY
from apps.projects import services as project_services
from apps.projects.models import Membership
from tests.conftest import child_process_env, die_with_the_test_run, free_port, wait_for
from tests.factories import PASSWORD
from workbench.server import uvicorn_argv

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow, pytest.mark.django_db(transaction=True)]
ASKS = 8  # requests per check: the two processes share them


@pytest.fixture(scope="module")
def two_process_server(django_db_setup, django_db_blocker, redis_service):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, *uvicorn_argv(host="127.0.0.1", port=port, workers=2)],
                              env=child_process_env(), stdin=subprocess.DEVNULL, preexec_fn=die_with_the_test_run)

    def healthy():
        try:
            return requests.get(f"{base}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(lambda: server.poll() is not None or healthy(), timeout=90, what="the server")
        assert server.poll() is None, f"the server exited with {server.returncode}"
        yield base
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def statuses(base: str, path: str, *, token: str | None = None, session: requests.Session | None = None) -> set[int]:
    client = session or requests.Session()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # A fresh connection each time, so that both processes take some of them.
    return {client.get(f"{base}{path}", headers={**headers, "Connection": "close"}, timeout=10,
                       allow_redirects=False).status_code for _ in range(ASKS)}


def test_a_revoked_token_a_removed_member_and_a_disabled_user_are_refused_at_once_by_every_process(
        two_process_server, project, owner, scientist, site_admin):
    base = two_process_server
    token, raw = account_services.token_create(user=scientist, name="ci", permissions=["project.view"])
    path = f"/api/projects/{project.pk}/"
    assert statuses(base, path, token=raw) == {200}

    membership = Membership.objects.get(project=project, user=scientist)
    project_services.member_remove(actor=owner, membership=membership)
    assert statuses(base, path, token=raw) == {404}  # other projects' objects: not found
    project_services.member_add(actor=owner, project=project, username=scientist.username, role="viewer")
    assert statuses(base, path, token=raw) == {200}

    account_services.token_revoke(user=scientist, api_token=token)
    assert statuses(base, path, token=raw) == {401}

    _, second = account_services.token_create(user=scientist, name="ci-2", permissions=["project.view"])
    assert statuses(base, path, token=second) == {200}
    account_services.user_set_active(by=site_admin, user=scientist, active=False)
    assert statuses(base, path, token=second) == {401}


def test_a_custom_roles_change_reaches_every_process(two_process_server, project, owner, scientist):
    base = two_process_server
    role = project_services.role_create(actor=owner, project=project, name="Readers",
                                        permissions=["project.view", "dataset.view"])
    membership = Membership.objects.get(project=project, user=scientist)
    project_services.member_change_role(actor=owner, membership=membership, role="Readers")
    _, raw = account_services.token_create(user=scientist, name="ci", permissions=["project.view", "dataset.view"])
    datasets = f"/api/projects/{project.pk}/datasets/"
    assert statuses(base, datasets, token=raw) == {200}
    project_services.role_update(actor=owner, role=role, permissions=["project.view"])
    assert statuses(base, datasets, token=raw) == {403}


def test_a_session_ends_everywhere_when_its_password_changes_and_survives_a_lost_generation(
        two_process_server, project, viewer, settings):
    base = two_process_server
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # what the server checks with
    viewer.set_password(PASSWORD)
    viewer.save()
    session = requests.Session()
    page = session.get(f"{base}/accounts/login/", timeout=10)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    session.post(f"{base}/accounts/login/", timeout=10,
                 data={"username": viewer.username, "password": PASSWORD, "csrfmiddlewaretoken": csrf},
                 headers={"Referer": f"{base}/accounts/login/"})
    home = f"/projects/{project.pk}/"
    assert statuses(base, home, session=session) == {200}

    cache.delete(GENERATION_KEY)  # Redis lost the key: a new generation, nothing kept is trusted
    assert statuses(base, home, session=session) == {200}

    viewer.set_password("another-long-password-1")
    viewer.save()  # the session's hash no longer matches: signed out at the next request, in every process
    answers = statuses(base, home, session=session)
    assert answers == {302}, answers


def _tables_read(client, path: str, raw: str) -> set[str]:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path, HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    # The look-ups themselves (the project's page also counts its members).
    looked_up = {"accounts_apitoken": '"accounts_apitoken"."key_hash"', "projects_membership": '"projects_role"."permissions"'}
    return {table for table, column in looked_up.items()
            if any(column in query["sql"] for query in queries.captured_queries)}


@pytest.mark.django_db
def test_the_token_and_membership_are_read_once_while_nothing_changes_and_again_after_a_change(
        client, project, owner, scientist, settings):
    _, raw = account_services.token_create(user=scientist, name="ci", permissions=["project.view"])
    path = f"/api/projects/{project.pk}/"
    _tables_read(client, path, raw)
    assert _tables_read(client, path, raw) == set()
    project_services.member_change_role(actor=owner, membership=Membership.objects.get(project=project, user=scientist),
                                        role="viewer")
    assert _tables_read(client, path, raw) == {"accounts_apitoken", "projects_membership"}
    assert _tables_read(client, path, raw) == set()
    settings.PRINCIPAL_CACHE = False
    assert _tables_read(client, path, raw) == {"accounts_apitoken", "projects_membership"}
