"""Signing out of a session opened by single sign-on ends the provider's session too
(OpenID Connect RP-Initiated Logout), against the real provider process."""

from urllib.parse import parse_qs, urlsplit

import jwt
import pytest

from tests.sso.conftest import CLIENT_ID, provider_user

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_signing_out_sends_the_browser_to_the_provider_which_ends_its_session_and_returns(person, corp):
    provider_user(corp, "lena")
    person.sign_in("lena")
    assert person.client.get("/projects/").status_code == 200

    response = person.client.post("/accounts/logout/")
    assert response.status_code == 302
    to_provider = urlsplit(response["Location"])
    assert f"{to_provider.scheme}://{to_provider.netloc}{to_provider.path}" == f"{corp.url}/o/logout/"
    query = {name: values[0] for name, values in parse_qs(to_provider.query).items()}
    assert query["client_id"] == CLIENT_ID
    assert query["post_logout_redirect_uri"] == "http://testserver/accounts/login/"
    hint = jwt.decode(query["id_token_hint"], options={"verify_signature": False})
    assert hint["aud"] == CLIENT_ID and hint["preferred_username"] == "lena"
    # The local session ended at once, whatever the provider does next.
    assert person.client.get("/projects/").status_code == 302

    # The provider ends its own session and sends the browser back to Workbench's login page.
    back = person.at_provider.get(response["Location"], allow_redirects=False, timeout=10)
    assert back.status_code == 302 and back.headers["Location"] == "http://testserver/accounts/login/"
    # Signing in again needs the password at the provider: its session is gone.
    again = person.at_provider.get(person.start(), allow_redirects=False, timeout=10)
    assert again.status_code == 302 and urlsplit(again.headers["Location"]).path == "/login/"


def test_a_refreshed_session_hands_the_provider_its_newest_id_token_at_sign_out(person, corp, settings):
    provider_user(corp, "lena")
    person.sign_in("lena")
    first = person.client.session["workbench_sso"]["id_token"]
    settings.SSO_REVALIDATE_S = 1
    session = person.client.session
    session["workbench_sso"] = {**session["workbench_sso"], "checked_at": 0}
    session.save()
    assert person.client.get("/projects/").status_code == 200  # re-checked with the refresh token
    newest = person.client.session["workbench_sso"]["id_token"]
    assert newest != first
    hint = parse_qs(urlsplit(person.client.post("/accounts/logout/")["Location"]).query)["id_token_hint"][0]
    assert hint == newest


def test_a_password_session_signs_out_locally_only(client, scientist, corp):
    client.force_login(scientist)
    response = client.post("/accounts/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert client.get("/projects/").status_code == 302


def test_a_provider_that_cannot_be_reached_at_sign_out_still_ends_the_local_session(person, corp, settings):
    provider_user(corp, "lena")
    person.sign_in("lena")
    from django.core.cache import cache

    cache.clear()  # the discovery document must be fetched again, from a provider that is gone
    settings.SSO_PROVIDERS = [{**settings.SSO_PROVIDERS[0], "discovery_url": "http://127.0.0.1:9/o"}]
    response = person.client.post("/accounts/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert person.client.get("/projects/").status_code == 302


def test_pages_of_a_single_sign_on_session_let_their_log_out_form_lead_to_the_provider(person, corp, client, owner):
    provider_user(corp, "lena")
    person.sign_in("lena")
    policy = person.client.get("/projects/")["Content-Security-Policy"]
    assert f"form-action 'self' {corp.url}" in policy
    client.force_login(owner)  # a password session's pages keep form-action to this site alone
    assert "form-action 'self';" in client.get("/projects/")["Content-Security-Policy"]
