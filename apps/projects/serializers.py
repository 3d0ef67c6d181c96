from django.contrib.auth import get_user_model
from guardian.models import UserObjectPermission
from rest_framework import serializers

from apps.projects import policy
from apps.projects.models import (
    SERVING_LIMIT_FIELDS,
    SERVING_MAX_CONCURRENT,
    SERVING_MAX_TOKENS_PER_MINUTE,
    AuditEvent,
    Membership,
    Project,
    Role,
)
from apps.projects.permissions import GRANTABLE, permission_from_codename


class ProjectSerializer(serializers.ModelSerializer):
    member_count = serializers.SerializerMethodField()
    archived = serializers.BooleanField(source="is_archived", read_only=True)

    class Meta:
        model = Project
        fields = ["id", "name", "description", "created_at", "archived", "member_count", *SERVING_LIMIT_FIELDS]
        read_only_fields = ["id", "created_at"]

    def get_member_count(self, project: Project) -> int:
        """Annotated by lists (one query for all); counted for a single project."""
        count = getattr(project, "member_count", None)
        return count if count is not None else project.memberships.count()


class ProjectWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120, required=False)
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)
    gpu_hour_budget = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1_000_000,
                                             help_text="worker hours the project's fine-tunes may use; null: no limit")
    serving_max_concurrent_per_token = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=SERVING_MAX_CONCURRENT,
        help_text="generations one API token may run at once; null: the site's default")
    serving_max_concurrent_per_project = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=SERVING_MAX_CONCURRENT,
        help_text="generations the project may run at once; null: the site's default")
    serving_tokens_per_minute_per_token = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=SERVING_MAX_TOKENS_PER_MINUTE,
        help_text="prompt and completion tokens one API token may use a minute; null: the site's default")
    serving_tokens_per_minute_per_project = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=SERVING_MAX_TOKENS_PER_MINUTE,
        help_text="prompt and completion tokens the project may use a minute; null: the site's default")


class ProjectArchiveSerializer(serializers.Serializer):
    archived = serializers.BooleanField()


class ProjectDeleteSerializer(serializers.Serializer):
    confirm_name = serializers.CharField(max_length=120)


class UserSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = get_user_model()
        fields = ["id", "username"]


class MembershipSerializer(serializers.ModelSerializer):
    user = UserSummarySerializer(read_only=True)
    role = serializers.CharField(source="role_name", read_only=True)
    permissions = serializers.SerializerMethodField()

    class Meta:
        model = Membership
        fields = ["id", "user", "role", "permissions", "created_at"]

    def get_permissions(self, membership) -> list[str]:
        return sorted(membership.permission_set)


class MemberAddSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.CharField(max_length=60, help_text="A built-in role key (owner, admin, scientist, "
                                                          "annotator, viewer) or a custom role's name.")


class MemberRoleSerializer(serializers.Serializer):
    role = serializers.CharField(max_length=60)


class RoleSerializer(serializers.ModelSerializer):
    member_count = serializers.IntegerField(read_only=True, required=False)

    class Meta:
        model = Role
        fields = ["id", "name", "description", "permissions", "member_count", "created_at"]


class RoleWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60, required=False)
    description = serializers.CharField(max_length=300, required=False, allow_blank=True)
    permissions = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=100)


class GrantSerializer(serializers.ModelSerializer):
    user = UserSummarySerializer(read_only=True)
    permission = serializers.SerializerMethodField()
    object_type = serializers.SerializerMethodField()
    object_id = serializers.CharField(source="object_pk", read_only=True)

    class Meta:
        model = UserObjectPermission
        fields = ["id", "user", "permission", "object_type", "object_id"]

    def get_object_type(self, grant) -> str:
        return permission_from_codename(grant.permission.codename).split(".")[0]

    def get_permission(self, grant) -> str:
        return permission_from_codename(grant.permission.codename)


class GrantCreateSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    object_type = serializers.ChoiceField(choices=list(GRANTABLE))
    object_id = serializers.IntegerField(min_value=1)
    permission = serializers.CharField(max_length=64)


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None, read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = ["id", "created_at", "actor", "action", "target_type", "target_id", "target_repr",
                  "ip_address", "before", "after"]


class _PermissionEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()


class _BuiltinRoleSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    permissions = serializers.ListField(child=serializers.CharField())


class PermissionCatalogueSerializer(serializers.Serializer):
    permissions = _PermissionEntrySerializer(many=True)
    roles = _BuiltinRoleSerializer(many=True)


class ManagerOnlyFieldsMixin:
    """Fields only those who may manage the object read: tracebacks and server paths tell an
    attacker about the machine, and members need only the error message. Others get them empty.
    The serializer needs the request in its context (DRF's generic views pass it)."""

    manage_permission: str = ""
    manager_only: tuple[str, ...] = ()  # top-level fields emptied
    manager_only_info: tuple[str, ...] = ()  # keys of the `info` object emptied

    def to_representation(self, instance):
        data = super().to_representation(instance)
        request = self.context.get("request")
        if request is not None and policy.can(request.user, self.manage_permission, instance, request.auth):
            return data
        for field in self.manager_only:
            if field in data:
                data[field] = ""
        if self.manager_only_info and isinstance(data.get("info"), dict):
            data["info"] = {k: ("" if k in self.manager_only_info else v) for k, v in data["info"].items()}
        return data
