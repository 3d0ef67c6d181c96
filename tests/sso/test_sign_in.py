"""Signing in with a real OpenID Connect provider: accounts by `sub`, creation, collisions, refusals."""

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model

from apps.projects.models import AuditEvent
from tests.sso.conftest import provider_user

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]
User = get_user_model()


def test_first_sign_in_creates_the_account_keyed_on_the_providers_subject(person, corp):
    provider_user(corp, "carol")
    response = person.sign_in("carol")
    assert response.status_code == 302 and response["Location"] == "/projects/"
    assert person.client.get("/projects/").status_code == 200
    user = User.objects.get(username="carol")
    assert user.email == "carol@corp.example" and not user.has_usable_password()
    account = SocialAccount.objects.get(user=user)
    assert account.provider == "corp" and account.uid  # the provider's sub
    assert AuditEvent.objects.filter(action="sso.account_create", target_id=str(user.pk)).exists()
    assert AuditEvent.objects.filter(action="sso.login", target_id=str(user.pk)).exists()


def test_a_second_sign_in_finds_the_same_account_by_subject_even_after_the_email_changed(person, corp):
    provider_user(corp, "carol")
    person.sign_in("carol")
    person.client.post("/accounts/logout/")
    provider_user(corp, "carol", email="carol.new@corp.example")
    assert person.sign_in("carol").status_code == 302
    assert User.objects.filter(username__startswith="carol").count() == 1
    assert SocialAccount.objects.get(provider="corp").extra_data["email"] == "carol.new@corp.example"


def _refused(response, text: str) -> None:
    assert response.status_code == 403, response.content[:300]
    assert text in response.content.decode()


def test_an_email_of_an_existing_local_account_is_refused_until_a_site_admin_links_them(person, corp, site_admin):
    from apps.accounts import services

    local = User.objects.create_user(username="dave", email="Dave@corp.example", password="x" * 12)
    provider_user(corp, "dave-idp", email="dave@corp.example")
    _refused(person.sign_in("dave-idp"), "An account with this email address already exists")
    assert not SocialAccount.objects.exists() and User.objects.count() == 2
    assert AuditEvent.objects.filter(action="sso.refused").exists()

    services.sso_link_approve(by=site_admin, username="dave", provider_id="corp", email="dave@corp.example")
    assert person.sign_in("dave-idp").status_code == 302
    assert SocialAccount.objects.get().user == local
    assert AuditEvent.objects.filter(action="sso.link", target_id=str(local.pk)).exists()


def test_without_auto_create_an_unknown_person_is_refused(person, corp, settings):
    settings.SSO_AUTO_CREATE = False
    provider_user(corp, "erin")
    _refused(person.sign_in("erin"), "You have no Workbench account yet")
    assert not User.objects.filter(email="erin@corp.example").exists()


def test_only_allowed_email_domains_may_sign_in(person, corp, settings):
    settings.SSO_ALLOWED_EMAIL_DOMAINS = ["corp.example"]
    provider_user(corp, "mallory", email="mallory@elsewhere.example")
    _refused(person.sign_in("mallory"), "Your email domain may not sign in here")
    provider_user(corp, "frank")
    assert person.sign_in("frank").status_code == 302


@pytest.mark.parametrize("fault", ["tamper", "foreign_key", "alg_none", "wrong_aud", "wrong_iss", "expired",
                                   "wrong_nonce"])
def test_a_bad_id_token_is_refused_and_nobody_is_signed_in(person, corp, fault):
    provider_user(corp, "gina")
    corp.control("fault", mode=fault)
    _refused(person.sign_in("gina"), "could not be completed")
    assert not User.objects.filter(username="gina").exists()
    assert person.client.get("/projects/").status_code == 302
    refusal = AuditEvent.objects.get(action="sso.refused")
    assert refusal.after["provider"] == "corp"


def test_a_replayed_callback_is_refused(person, corp):
    provider_user(corp, "hank")
    person.provider_login("hank")
    callback = person.authorize(person.start())
    assert person.callback(callback).status_code == 302
    person.client.post("/accounts/logout/")
    _refused(person.callback(callback), "could not be completed")  # state used once
    assert person.client.get("/projects/").status_code == 302


def test_a_callback_with_another_state_or_from_another_browser_is_refused(person, corp, client):
    from django.test import Client

    provider_user(corp, "ivy")
    person.provider_login("ivy")
    callback = person.authorize(person.start())
    _refused(person.callback(callback.replace("state=", "state=x")), "could not be completed")
    # The victim's browser never started this sign-in: the attacker's code must not sign it in.
    victim = Client()
    _refused(victim.get(callback.removeprefix("http://testserver")), "could not be completed")
    assert victim.get("/projects/").status_code == 302


def test_the_authorization_request_carries_pkce_a_nonce_and_nothing_from_the_query_string(person, corp):
    from urllib.parse import parse_qs, urlsplit

    response = person.client.post("/accounts/sso/corp/login/?scope=admin&auth_params=nonce%3Dfixed")
    query = parse_qs(urlsplit(response["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    assert len(query["nonce"][0]) >= 32 and query["nonce"] != ["fixed"]
    assert sorted(query["scope"][0].split()) == ["email", "openid", "profile"] and query["state"]


def test_starting_a_sign_in_needs_a_post_and_an_unknown_provider_is_404(person, corp):
    assert person.client.get("/accounts/sso/corp/login/").status_code == 405
    assert person.client.post("/accounts/sso/nope/login/").status_code == 404
    assert person.client.get("/accounts/sso/nope/callback/?code=x&state=y").status_code == 404


def test_a_rotated_signing_key_is_accepted_after_the_keys_are_fetched_again(person, corp):
    from django.core.cache import cache

    provider_user(corp, "jack")
    assert person.sign_in("jack").status_code == 302  # caches the provider's keys (one key id)
    old_kid = corp.control("fault", mode="")["kid"]
    new_kid = corp.control("rotate")["kid"]
    assert new_kid != old_kid
    assert any(k.startswith("workbench:1:sso:jwks:") or ":sso:jwks:" in k for k in _cache_keys(cache))
    person.client.post("/accounts/logout/")
    assert person.sign_in("jack").status_code == 302  # unknown kid: the JWKS is fetched again
    assert person.client.get("/projects/").status_code == 200


def _cache_keys(cache) -> list[str]:
    client = cache._cache.get_client(write=True)
    return [k.decode() for k in client.scan_iter(match="*sso:jwks:*")]


def test_a_deactivated_account_cannot_sign_in_with_the_provider(person, corp):
    provider_user(corp, "kate")
    person.sign_in("kate")
    person.client.post("/accounts/logout/")
    kate = User.objects.get(username="kate")
    kate.is_active = False
    kate.save()
    _refused(person.sign_in("kate"), "This account is deactivated")
