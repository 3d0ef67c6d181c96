from django.contrib.auth import get_user_model
from rest_framework import serializers

from apps.projects.models import Membership, Project


class ProjectSerializer(serializers.ModelSerializer):
    member_count = serializers.IntegerField(read_only=True, required=False)
    archived = serializers.BooleanField(source="is_archived", read_only=True)

    class Meta:
        model = Project
        fields = ["id", "name", "description", "created_at", "archived", "member_count"]
        read_only_fields = ["id", "created_at"]


class ProjectWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120, required=False)
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)


class UserSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = get_user_model()
        fields = ["id", "username"]


class MembershipSerializer(serializers.ModelSerializer):
    user = UserSummarySerializer(read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user", "role", "created_at"]
