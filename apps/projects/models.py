from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Lower

from apps.projects.permissions import BUILTIN_ROLES, ROLE_CHOICES

# The largest serving limits a project may set: beyond them a number is a typo, not a limit.
SERVING_MAX_CONCURRENT = 10_000
SERVING_MAX_TOKENS_PER_MINUTE = 1_000_000_000
SERVING_LIMIT_FIELDS = {"serving_max_concurrent_per_token": SERVING_MAX_CONCURRENT,
                        "serving_max_concurrent_per_project": SERVING_MAX_CONCURRENT,
                        "serving_tokens_per_minute_per_token": SERVING_MAX_TOKENS_PER_MINUTE,
                        "serving_tokens_per_minute_per_project": SERVING_MAX_TOKENS_PER_MINUTE}


class Project(models.Model):
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True, max_length=5000)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    archived_at = models.DateTimeField(null=True, blank=True)
    # Worker hours its fine-tune jobs may use (time from start to end, every run); None: no limit.
    gpu_hour_budget = models.FloatField(null=True, blank=True)
    # Fair sharing of serving (apps/serving/limits.py); None: the site's default (settings.SERVING_*).
    serving_max_concurrent_per_token = models.IntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(SERVING_MAX_CONCURRENT)])
    serving_max_concurrent_per_project = models.IntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(SERVING_MAX_CONCURRENT)])
    serving_tokens_per_minute_per_token = models.IntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(SERVING_MAX_TOKENS_PER_MINUTE)])
    serving_tokens_per_minute_per_project = models.IntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(SERVING_MAX_TOKENS_PER_MINUTE)])

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None


class Role(models.Model):
    """A project's custom role: a named set of permissions, assignable like a built-in one."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="roles")
    name = models.CharField(max_length=60)
    description = models.CharField(max_length=300, blank=True)
    permissions = models.JSONField(default=list)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(Lower("name"), "project",
                                               name="unique_role_name_per_project")]

    def __str__(self) -> str:
        return self.name

    @property
    def permission_set(self) -> frozenset[str]:
        return frozenset(self.permissions)


class Membership(models.Model):
    """A user's role on a project: a built-in one (`role`) or a custom one (`custom_role`)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=32, choices=ROLE_CHOICES, blank=True)
    custom_role = models.ForeignKey(Role, null=True, blank=True, on_delete=models.RESTRICT, related_name="memberships")
    created_at = models.DateTimeField(auto_now_add=True)

    class Source(models.TextChoices):
        MANUAL = "manual", "Added by hand"
        GROUPS = "groups", "From identity-provider groups"

    # Where the membership came from: single sign-on adds, changes and removes only its own
    # (GROUPS); a membership added by hand is never touched by a group sync.
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.MANUAL)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user"),
            models.CheckConstraint(
                condition=(models.Q(custom_role__isnull=True) & ~models.Q(role=""))
                | (models.Q(custom_role__isnull=False) & models.Q(role="")),
                name="membership_has_exactly_one_role"),
        ]
        indexes = [models.Index(fields=["user", "project"])]

    def __str__(self) -> str:
        return f"{self.user} as {self.role_name} in {self.project}"

    @property
    def role_name(self) -> str:
        return self.custom_role.name if self.custom_role_id else self.get_role_display()

    @property
    def permission_set(self) -> frozenset[str]:
        if self.custom_role_id:
            return self.custom_role.permission_set
        return BUILTIN_ROLES[self.role].permissions


class AuditEvent(models.Model):
    """Append-only record of a security-relevant or destructive action."""

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise RuntimeError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise RuntimeError("audit events are append-only")
