"""A single-sign-on session that only holds a websocket is re-checked with the provider too, through
the real server (uvicorn with the real ASGI application) and the real provider process: a person
disabled at the provider, or removed from the group that gave the project, has the socket closed
within SSO_REVALIDATE_S; a local deactivation or a sign-out closes it at once. The refresh token
is kept encrypted in the session store (its database row and its cache entry)."""

import json
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.accounts import services
from apps.accounts.sso import SESSION_KEY
from apps.projects.models import AuditEvent, Membership
from apps.projects.sockets import CLOSE_FORBIDDEN, CLOSE_UNAUTHORIZED
from tests.conftest import wait_for
from tests.sso.conftest import provider_user

pytestmark = pytest.mark.timeout(120)
User = get_user_model()
INTERVAL_S = 2


@pytest.fixture
def signed_in(live_asgi, person, corp, project, owner, site_admin, settings):
    """Lena signed in through the provider (her group gives her the project), SSO_REVALIDATE_S short,
    and no request of her session made after that: what follows only holds sockets."""
    settings.SSO_REVALIDATE_S = INTERVAL_S
    services.sso_mapping_create(by=site_admin, provider_id="corp", group="ml-team", project=project, role="scientist")
    provider_user(corp, "lena", groups=["ml-team"])
    assert person.sign_in("lena").status_code == 302
    return User.objects.get(username="lena")


def open_socket(live_asgi, person, project):
    url = live_asgi.replace("http://", "ws://") + f"/ws/projects/{project.pk}/activity/"
    return connect(url, origin=live_asgi, open_timeout=10,
                   additional_headers={"Cookie": f"sessionid={person.client.cookies['sessionid'].value}"})


def pong(socket) -> bool:
    socket.send(json.dumps({"type": "ping"}))
    while True:  # activity events may come first
        if json.loads(socket.recv(timeout=10))["type"] == "pong":
            return True


def closed_within(socket, seconds: float) -> int:
    """The close code the server sends within `seconds` (messages before it are skipped)."""
    deadline = time.monotonic() + seconds
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            socket.recv(timeout=max(deadline - time.monotonic(), 0.01))
    return closed.value.rcvd.code


def stored_state(person) -> dict | None:
    from django.contrib.sessions.backends.cached_db import SessionStore

    return SessionStore(person.client.cookies["sessionid"].value).load().get(SESSION_KEY)


def test_a_socket_only_session_is_rechecked_and_closed_when_the_provider_disables_the_person(
        live_asgi, person, corp, project, signed_in):
    signed_in_at = stored_state(person)["checked_at"]
    with open_socket(live_asgi, person, project) as socket:
        assert pong(socket)
        # The socket re-checks the session (no page or API request does): refreshed at the provider.
        wait_for(lambda: stored_state(person)["checked_at"] > signed_in_at, timeout=INTERVAL_S + 8,
                 what="the socket to re-check its session")
        assert pong(socket)
        provider_user(corp, "lena", groups=["ml-team"], active=False)
        disabled_at = time.monotonic()
        assert closed_within(socket, INTERVAL_S + 8) == CLOSE_UNAUTHORIZED
        assert time.monotonic() - disabled_at <= INTERVAL_S + 5
    event = AuditEvent.objects.get(action="sso.session_ended")
    assert "refused" in event.after["reason"] and event.actor_id == signed_in.pk
    assert stored_state(person) is None  # the session ended: its pages ask to sign in again
    assert person.client.get("/projects/").status_code == 302


def test_a_socket_only_session_loses_the_project_its_group_gave_within_the_interval(
        live_asgi, person, corp, project, signed_in):
    with open_socket(live_asgi, person, project) as socket:
        assert pong(socket)
        provider_user(corp, "lena", groups=[])
        removed_at = time.monotonic()
        assert closed_within(socket, INTERVAL_S + 8) == CLOSE_FORBIDDEN
        assert time.monotonic() - removed_at <= INTERVAL_S + 5
    assert not Membership.objects.filter(user=signed_in, project=project).exists()
    assert person.client.get("/projects/").status_code == 200  # still signed in, without the project


def test_a_sign_out_closes_the_sessions_sockets_at_once(live_asgi, person, corp, project, signed_in, settings):
    settings.SSO_REVALIDATE_S = 300
    with open_socket(live_asgi, person, project) as socket:
        assert pong(socket)
        person.client.post("/accounts/logout/")
        assert closed_within(socket, 5) == CLOSE_UNAUTHORIZED


def test_a_local_deactivation_closes_the_sockets_at_once(live_asgi, person, corp, project, signed_in, site_admin,
                                                         settings):
    settings.SSO_REVALIDATE_S = 300
    with open_socket(live_asgi, person, project) as socket:
        assert pong(socket)
        services.user_set_active(by=site_admin, user=signed_in, active=False)
        assert closed_within(socket, 5) == CLOSE_UNAUTHORIZED


def _raw_session(session_key: str) -> tuple[str, bytes]:
    """The session's database row and its cache entry, as stored."""
    from django.contrib.sessions.backends.cached_db import KEY_PREFIX

    with connection.cursor() as cursor:
        cursor.execute("SELECT session_data FROM django_session WHERE session_key = %s", [session_key])
        row = cursor.fetchone()[0]
    entry = cache._cache.get_client(write=False).get(cache.make_key(KEY_PREFIX + session_key)) or b""
    return row, entry


def test_the_session_store_holds_the_refresh_token_only_encrypted(person, corp, signed_in, settings, live_asgi):
    from cryptography.fernet import Fernet
    from django.contrib.sessions.backends.cached_db import SessionStore

    from apps.core.crypto import fernet

    session_key = person.client.cookies["sessionid"].value

    def assert_sealed() -> str:
        row, entry = _raw_session(session_key)
        decoded = json.dumps(SessionStore().decode(row))
        state = stored_state(person)
        assert "refresh_token" not in state
        token = fernet().decrypt(state["refresh_token_sealed"].encode()).decode()
        assert len(token) >= 10
        assert token not in row and token not in decoded and token.encode() not in entry
        assert entry  # the cache entry was read, not missed
        return token

    first = assert_sealed()
    # A new key in front of PROVIDER_KEYS: the next re-check seals the rotated token with it, so the
    # old key can go after one interval.
    settings.PROVIDER_KEYS = [Fernet.generate_key().decode(), *settings.PROVIDER_KEYS]
    session = person.client.session
    session[SESSION_KEY] = {**session[SESSION_KEY], "checked_at": 0}
    session.save()
    assert person.client.get("/projects/").status_code == 200
    second = assert_sealed()
    assert second != first  # the provider rotated it
    settings.PROVIDER_KEYS = settings.PROVIDER_KEYS[:1]
    session = person.client.session
    session[SESSION_KEY] = {**session[SESSION_KEY], "checked_at": 0}
    session.save()
    assert person.client.get("/projects/").status_code == 200


def test_a_refresh_token_sealed_with_a_dropped_key_ends_the_session_with_a_clear_reason(person, corp, signed_in,
                                                                                       settings):
    from cryptography.fernet import Fernet

    settings.PROVIDER_KEYS = [Fernet.generate_key().decode()]  # the key it was sealed with is gone
    session = person.client.session
    session[SESSION_KEY] = {**session[SESSION_KEY], "checked_at": 0}
    session.save()
    assert person.client.get("/projects/").status_code == 302
    assert "cannot be decrypted with PROVIDER_KEYS" in AuditEvent.objects.get(action="sso.session_ended").after["reason"]


def test_a_socket_stays_open_while_the_provider_cannot_be_reached(live_asgi, person, corp, project, signed_in,
                                                                  settings, caplog):
    caplog.set_level("WARNING", logger="apps.accounts.sso")
    with open_socket(live_asgi, person, project) as socket:
        assert pong(socket)
        from apps.accounts.oidc import _cache_key

        cache.delete(_cache_key("meta", f"{corp.url}/o/.well-known/openid-configuration"))
        settings.SSO_PROVIDERS = [{**settings.SSO_PROVIDERS[0], "discovery_url": "http://127.0.0.1:9/o"}]
        time.sleep(INTERVAL_S + 2)  # a re-check fell due and could not reach the provider: not a refusal
        assert pong(socket)
    assert "could not re-check a single-sign-on session" in caplog.text
    assert stored_state(person) is not None
    assert not AuditEvent.objects.filter(action="sso.session_ended").exists()


def test_a_session_from_before_tokens_were_sealed_is_rechecked_and_sealed(person, corp, signed_in, settings,
                                                                         live_asgi):
    from apps.core.crypto import fernet

    session = person.client.session
    state = dict(session[SESSION_KEY])
    plaintext = fernet().decrypt(state.pop("refresh_token_sealed").encode()).decode()
    session[SESSION_KEY] = {**state, "refresh_token": plaintext, "checked_at": 0}
    session.save()
    assert person.client.get("/projects/").status_code == 200
    state = stored_state(person)
    assert "refresh_token" not in state and state["refresh_token_sealed"]
    assert plaintext not in json.dumps(state)
