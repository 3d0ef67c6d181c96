import pytest

from apps.providers import services
from apps.providers.models import AllowedNetwork

SECRET = "sk-canary-Do-Not-Leak-7f3a9c"


@pytest.fixture
def loopback_allowed(site_admin):
    return services.allowlist_add(user=site_admin, network="127.0.0.0/8", note="tests")


@pytest.fixture
def provider(site_admin, loopback_allowed, project):
    """A provider on a loopback address (nothing listens there: for tests that never call it),
    enabled for `project`."""
    made = services.provider_create(user=site_admin, name="Local", base_url="http://127.0.0.1:9/v1", api_key=SECRET,
                                    models=["m1", "m2"], max_retries=0, timeout_s=5)
    services.provider_enable(user=site_admin, provider=made, project_id=project.pk)
    return made


__all__ = ["AllowedNetwork"]
