"""API keys at rest: encrypted with a key from the environment (the column never holds the
key), never sent back (only the last four characters), and rotatable: a new primary key still
reads old rows, and re-encryption moves every row to it."""

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from apps.providers import crypto, services
from apps.providers.models import Provider
from tests.providers.conftest import SECRET

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]


def stored_column(provider) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT api_key_encrypted, api_key_last4 FROM {Provider._meta.db_table} WHERE id = %s",
                       [provider.pk])
        return " ".join(cursor.fetchone())


def test_the_database_holds_only_the_encrypted_key_and_its_last_four_characters(provider):
    raw = stored_column(provider)
    assert SECRET not in raw and SECRET[:-4] not in raw
    assert provider.api_key_last4 == SECRET[-4:] and provider.api_key_hint == "…" + SECRET[-4:]
    assert crypto.decrypt(Provider.objects.get(pk=provider.pk).api_key_encrypted) == SECRET


def test_the_key_is_never_sent_back_by_the_api_pages_or_the_audit_log(client, site_admin, provider):
    from apps.projects.models import AuditEvent

    client.force_login(site_admin)
    for url in ("/api/providers/", f"/api/providers/{provider.pk}/", "/providers/", f"/providers/{provider.pk}/"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert SECRET.encode() not in response.content and SECRET[:-4].encode() not in response.content, url
    assert client.get(f"/api/providers/{provider.pk}/").json()["api_key_hint"] == "…" + SECRET[-4:]
    for event in AuditEvent.objects.filter(action__startswith="provider."):
        assert SECRET not in str(event.before) + str(event.after)


def test_a_new_primary_key_still_reads_old_rows_and_rotation_moves_them_to_it(provider, settings):
    old = list(settings.PROVIDER_KEYS)
    new = Fernet.generate_key().decode()
    settings.PROVIDER_KEYS = [new, *old]
    assert crypto.decrypt(Provider.objects.get(pk=provider.pk).api_key_encrypted) == SECRET  # old row, new list
    before = stored_column(provider)

    call_command("rotate_provider_keys", stdout=open("/dev/null", "w"))
    assert stored_column(provider) != before
    settings.PROVIDER_KEYS = [new]  # the old key dropped: rotated rows still read
    assert crypto.decrypt(Provider.objects.get(pk=provider.pk).api_key_encrypted) == SECRET
    settings.PROVIDER_KEYS = old  # and the old key alone no longer does
    with pytest.raises(crypto.KeyUnreadable):
        crypto.decrypt(Provider.objects.get(pk=provider.pk).api_key_encrypted)


def test_a_call_with_an_unreadable_key_fails_clearly_without_the_key(provider, project, settings, scientist):
    settings.PROVIDER_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(services.ProviderError) as failed:
        services.provider_chat(project, provider.models.first(), [{"role": "user", "content": "hi"}], user=scientist)
    assert "PROVIDER_KEYS" in failed.value.message


def test_an_empty_key_list_is_a_clear_configuration_error(settings):
    from django.core.exceptions import ImproperlyConfigured

    settings.PROVIDER_KEYS = []
    with pytest.raises(ImproperlyConfigured, match="PROVIDER_KEYS"):
        crypto.encrypt("x")


def test_updating_without_a_key_keeps_it_and_a_new_key_replaces_it(site_admin, provider):
    services.provider_update(user=site_admin, provider=provider, api_key="", name="Local 2")
    assert crypto.decrypt(Provider.objects.get(pk=provider.pk).api_key_encrypted) == SECRET
    services.provider_update(user=site_admin, provider=provider, api_key="sk-another-key-0000")
    assert Provider.objects.get(pk=provider.pk).api_key_last4 == "0000"
    services.provider_update(user=site_admin, provider=provider, clear_api_key=True)
    assert Provider.objects.get(pk=provider.pk).api_key_encrypted == ""
