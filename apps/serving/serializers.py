from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.registry.models import ModelAlias
from apps.serving.canary import canary_health


class CanarySetSerializer(serializers.Serializer):
    version = serializers.IntegerField(help_text="the version the canary share is served: the model itself, one of "
                                                 "its adapters or a model merged from one")
    weight = serializers.IntegerField(help_text="percent of callers served the canary (1-99); the alias's version "
                                                "keeps the rest")
    steps = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=20,
                                  help_text="rising weights to step to while healthy, ending at 100 (promotion)")
    interval_s = serializers.IntegerField(required=False, default=0, help_text="seconds between steps")
    max_error_rate = serializers.FloatField(required=False, allow_null=True, default=None,
                                            help_text="roll back above this share of failed canary requests")
    max_p99_latency_s = serializers.FloatField(required=False, allow_null=True, default=None,
                                               help_text="roll back above this p99 request time (seconds)")
    min_requests = serializers.IntegerField(required=False, default=20,
                                            help_text="canary requests judged before any rollback")


class VersionHealthSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    error_rate = serializers.FloatField(allow_null=True)
    p99_latency_s = serializers.FloatField(allow_null=True)


class CanaryHealthSerializer(serializers.Serializer):
    canary = VersionHealthSerializer()
    stable = VersionHealthSerializer()
    breach = serializers.CharField(allow_null=True)


class CanarySerializer(serializers.ModelSerializer):
    ref = serializers.SerializerMethodField(help_text="what clients ask for: name@alias")
    version_name = serializers.CharField(source="version.name", read_only=True)
    canary_version_name = serializers.CharField(source="canary_version.name", read_only=True, allow_null=True)
    rollout_steps = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    health = serializers.SerializerMethodField()

    class Meta:
        model = ModelAlias
        fields = ["name", "ref", "model", "version", "version_name", "protected", "canary_version",
                  "canary_version_name", "canary_weight", "canary_started_at", "rollout_steps", "rollout_interval_s",
                  "max_error_rate", "max_p99_latency_s", "min_requests", "health"]

    def get_ref(self, alias) -> str:
        return f"{alias.model.name}@{alias.name}"

    @extend_schema_field(CanaryHealthSerializer(allow_null=True))
    def get_health(self, alias) -> dict | None:
        return canary_health(alias)
