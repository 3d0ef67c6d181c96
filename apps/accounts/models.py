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


class SsoGroupMapping(models.Model):
    """A site admin's rule: members of `group` at provider `provider_id` get a project role
    (built-in `role` or `custom_role`) or, with `site_admin`, the site admin flag. Applied at
    every sign-in and re-check (apps/accounts/sso.py)."""

    provider_id = models.CharField(max_length=40)
    group = models.CharField(max_length=256)
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="sso_group_mappings")
    role = models.CharField(max_length=32, blank=True, help_text="built-in role key")
    custom_role = models.ForeignKey("projects.Role", null=True, blank=True, on_delete=models.CASCADE,
                                    related_name="sso_group_mappings")
    site_admin = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["provider_id", "group", "id"]
        constraints = [
            # Either site admin (no project), or a project with exactly one kind of role.
            models.CheckConstraint(
                condition=models.Q(site_admin=True, project__isnull=True, custom_role__isnull=True, role="")
                | (models.Q(site_admin=False, project__isnull=False)
                   & ((models.Q(custom_role__isnull=True) & ~models.Q(role=""))
                      | (models.Q(custom_role__isnull=False) & models.Q(role="")))),
                name="sso_mapping_is_site_admin_or_one_project_role"),
            models.UniqueConstraint(fields=["provider_id", "group", "project"], name="one_sso_mapping_per_group_project"),
            models.UniqueConstraint(fields=["provider_id", "group"], condition=models.Q(site_admin=True),
                                    name="one_site_admin_sso_mapping_per_group"),
        ]

    def __str__(self) -> str:
        return f"{self.provider_id}:{self.group} → {self.target}"

    @property
    def target(self) -> str:
        if self.site_admin:
            return "site admin"
        role = self.custom_role.name if self.custom_role_id else self.role
        return f"{role} in {self.project}"


class SsoLinkApproval(models.Model):
    """A site admin's consent that the provider identity carrying `email` may sign in to the existing
    local account `user` (an email that matches a local account is refused without it). Used once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_link_approvals")
    provider_id = models.CharField(max_length=40)
    email = models.EmailField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"link {self.email} at {self.provider_id} to {self.user}"


class SsoProfile(models.Model):
    """What single sign-on last set on an account: whether its site admin flag came from a group
    (a flag set by hand is never taken away by a sync) and the groups the provider last sent."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_profile")
    provider_id = models.CharField(max_length=40)
    staff_from_groups = models.BooleanField(default=False)
    groups = models.JSONField(default=list)
    synced_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"single sign-on of {self.user}"
