"""A real OpenID Connect provider (django-oauth-toolkit, tests/sso/provider) in its own process on
loopback, and a person signing in through it: the provider's login form, its authorize and token
endpoints, its JWKS and user info, all over real HTTP."""

import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import PASSWORD, child_process_env, die_with_the_test_run, free_port

REPO = Path(__file__).resolve().parents[2]
CLIENT_ID = "workbench-test"
CLIENT_SECRET = "workbench-test-secret-" + "s" * 20


class Provider:
    def __init__(self, tmp: Path):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_file = tmp / "provider-key.pem"
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in child_process_env().items() if k != "DJANGO_SETTINGS_MODULE"}
        env.update(PROVIDER_DB=str(tmp / "provider.sqlite3"), PROVIDER_KEY_FILE=str(key_file))
        self.process = subprocess.Popen([sys.executable, "-m", "tests.sso.provider.serve", str(self.port)], cwd=REPO,
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        preexec_fn=die_with_the_test_run)
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the test provider did not start: {line}{self.process.stdout.read()}")

    def control(self, action: str, **data) -> dict:
        response = requests.post(f"{self.url}/control/{action}/", json=data, timeout=10)
        response.raise_for_status()
        return response.json()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory):
    provider = Provider(tmp_path_factory.mktemp("oidc-provider"))
    yield provider
    provider.stop()


@pytest.fixture
def corp(oidc_provider, settings):
    """Workbench configured with the test provider as "corp" (as SSO_PROVIDERS=corp and its
    variables would), the client registered at the provider, and no injected fault."""
    oidc_provider.control("fault", mode="")
    register_client(oidc_provider, "http://testserver")
    settings.SSO_PROVIDERS = [{"id": "corp", "name": "Corp ID", "discovery_url": f"{oidc_provider.url}/o",
                               "client_id": CLIENT_ID, "secret": CLIENT_SECRET, "groups_claim": "groups"}]
    settings.SSO_AUTO_CREATE = True
    settings.SSO_ALLOWED_EMAIL_DOMAINS = []
    settings.SSO_REVALIDATE_S = 300
    return oidc_provider


def register_client(provider, *origins: str) -> None:
    provider.control("client", client_id=CLIENT_ID, client_secret=CLIENT_SECRET,
                     redirect_uris=[f"{origin}/accounts/sso/corp/callback/" for origin in origins],
                     post_logout_redirect_uris=[f"{origin}/accounts/login/" for origin in origins])


def provider_user(provider, username: str, *, email: str | None = None, groups=(), active: bool = True,
                  claims: dict | None = None) -> None:
    provider.control("user", username=username, password=PASSWORD, email=email or f"{username}@corp.example",
                     active=active, claims={"groups": list(groups), **(claims or {})})


class Person:
    """Someone at a browser: the Django test client for Workbench, a requests session for the
    provider (its own cookies: the provider's session)."""

    def __init__(self, client, provider):
        self.client = client
        self.provider = provider
        self.at_provider = requests.Session()

    def provider_login(self, username: str, password: str = PASSWORD) -> None:
        page = self.at_provider.get(f"{self.provider.url}/login/", timeout=10)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        answer = self.at_provider.post(f"{self.provider.url}/login/", timeout=10, allow_redirects=False,
                                       data={"username": username, "password": password, "csrfmiddlewaretoken": token},
                                       headers={"Referer": f"{self.provider.url}/login/"})
        assert answer.status_code == 302, "the provider refused the login"

    def start(self, provider_id: str = "corp"):
        response = self.client.post(f"/accounts/sso/{provider_id}/login/")
        assert response.status_code == 302, response.content[:500]
        return response["Location"]

    def authorize(self, authorize_url: str) -> str:
        """The provider's answer to the authorization request: our callback URL with code and state."""
        answer = self.at_provider.get(authorize_url, allow_redirects=False, timeout=10)
        assert answer.status_code == 302, answer.text[:500]
        location = answer.headers["Location"]
        assert location.startswith("http://testserver/accounts/sso/"), location
        return location

    def callback(self, location: str):
        parts = urlsplit(location)
        return self.client.get(f"{parts.path}?{parts.query}")

    def sign_in(self, username: str, provider_id: str = "corp"):
        self.provider_login(username)
        return self.callback(self.authorize(self.start(provider_id)))


@pytest.fixture
def person(client, corp):
    return Person(client, corp)


def wait_until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
