import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


def test_no_anonymous_account_exists_or_is_listed(client, site_admin):
    assert not get_user_model().objects.filter(username="AnonymousUser").exists()
    client.force_login(site_admin)
    page = client.get("/accounts/users/").content.decode()
    assert "root" in page and "AnonymousUser" not in page
