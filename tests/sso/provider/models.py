from django.conf import settings
from django.db import models


class ExtraClaims(models.Model):
    """Claims the provider adds to a user's ID token and user info (groups, or anything a test
    wants to send). The provider's tables are made with `migrate --run-syncdb`."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="extra_claims")
    claims = models.JSONField(default=dict)
