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
