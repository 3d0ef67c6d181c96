import hashlib

from django.conf import settings
from django.db import models
from django.utils import timezone


def hash_secret(secret: str) -> str:
    """Stored form of invitation and token secrets: they are random, so plain SHA-256 suffices."""
    return hashlib.sha256(secret.encode()).hexdigest()


class Invitation(models.Model):
    """A one-time link that lets a person set their password and join (optionally a project)."""

    username = models.CharField(max_length=150)
    email = models.EmailField(blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.CASCADE)
    role = models.CharField(max_length=60, blank=True, help_text="built-in role key or custom role name")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="invitations_accepted")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation for {self.username}"

    @property
    def is_expired(self) -> bool:
        return timezone.now() >= self.expires_at

    @property
    def status(self) -> str:
        if self.used_at:
            return "used"
        return "expired" if self.is_expired else "pending"


class ApiToken(models.Model):
    """A bearer token: personal (any project of its user) or scoped to one project.

    It carries a chosen subset of permissions; what it may do is always the intersection of
    that subset with what its user holds now, so a removed member's tokens stop at once.
    """

    PREFIX = "wb"

    name = models.CharField(max_length=100)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="api_tokens")
    permissions = models.JSONField(default=list)
    key_id = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"token {self.name} ({self.key_id})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or timezone.now() < self.expires_at)

    def narrow(self, permissions: frozenset[str], *, project_id: int) -> frozenset[str]:
        if self.project_id is not None and self.project_id != project_id:
            return frozenset()
        return permissions & frozenset(self.permissions)
