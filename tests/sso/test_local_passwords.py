"""Local passwords off for everyone but the break-glass admin; the login page offers each provider."""

import pytest

from tests.conftest import PASSWORD
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]


@pytest.fixture
def passwords_off(settings, corp):
    settings.LOCAL_PASSWORD_LOGIN = False
    settings.BREAK_GLASS_USERS = ["breakglass"]


def test_the_login_page_offers_each_provider_and_allows_its_authorization_origin(client, corp):
    response = client.get("/accounts/login/")
    page = response.content.decode()
    assert "Sign in with Corp ID" in page and 'action="/accounts/sso/corp/login/"' in page
    assert 'name="password"' in page  # passwords on: both
    assert f"form-action 'self' {corp.url}" in response["Content-Security-Policy"]


def test_with_passwords_off_only_the_break_glass_admin_logs_in_with_a_password(client, passwords_off):
    UserFactory(username="alice")
    UserFactory(username="breakglass", is_staff=True)
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with Corp ID" in page and 'name="password"' not in page and "Break-glass" in page
    assert 'name="password"' in client.get("/accounts/login/?local=1").content.decode()

    refused = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 200 and "Please enter a correct username and password" in refused.content.decode()
    assert client.get("/projects/").status_code == 302

    allowed = client.post("/accounts/login/", {"username": "breakglass", "password": PASSWORD})
    assert allowed.status_code == 302 and client.get("/projects/").status_code == 200


def test_with_passwords_off_the_provider_still_signs_people_in(person, passwords_off):
    from tests.sso.conftest import provider_user

    provider_user(person.provider, "uma")
    assert person.sign_in("uma").status_code == 302
    assert person.client.get("/projects/").status_code == 200


def test_passwords_off_without_a_provider_is_refused_at_start_up(monkeypatch):
    import subprocess
    import sys

    from tests.conftest import child_process_env

    env = {**child_process_env(), "LOCAL_PASSWORD_LOGIN": "false", "SSO_PROVIDERS": ""}
    out = subprocess.run([sys.executable, "-c", "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE',"
                          " 'workbench.settings'); django.setup()"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "LOCAL_PASSWORD_LOGIN=false needs at least one provider" in out.stderr
