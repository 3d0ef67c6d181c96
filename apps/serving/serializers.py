from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.registry.models import ModelAlias
from apps.serving.canary import canary_health
from apps.serving.models import Capture, Classification
from apps.serving.services import MAX_CLASSIFY_CHARS, MAX_CLASSIFY_TEXTS


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
                                            help_text="canary requests judged before any rollback (and, with a "
                                                      "quality judge, answers it scored on each side)")
    quality_judge = serializers.IntegerField(required=False, allow_null=True, default=None,
                                             help_text="a calibrated pointwise judge of the project that scores "
                                                       "both versions' captured answers (request logging on)")
    max_quality_drop = serializers.FloatField(required=False, allow_null=True, default=None,
                                              help_text="roll back when the canary's mean judge score (0-1) is "
                                                        "more than this below the stable version's")


class VersionHealthSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    error_rate = serializers.FloatField(allow_null=True)
    p99_latency_s = serializers.FloatField(allow_null=True)
    judged = serializers.IntegerField(required=False, help_text="answers the quality judge scored")
    unreadable = serializers.IntegerField(required=False, help_text="answers whose judge verdict was unreadable")
    quality = serializers.FloatField(required=False, allow_null=True, help_text="the mean judge score, 0-1")


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
                  "max_error_rate", "max_p99_latency_s", "min_requests", "quality_judge", "max_quality_drop",
                  "health"]

    def get_ref(self, alias) -> str:
        return f"{alias.model.name}@{alias.name}"

    @extend_schema_field(CanaryHealthSerializer(allow_null=True))
    def get_health(self, alias) -> dict | None:
        return canary_health(alias)


class ServingMetricsQuerySerializer(serializers.Serializer):
    hours = serializers.IntegerField(required=False, default=24, min_value=1, max_value=720,
                                     help_text="the window, in hours back from now (1-720)")
    bucket_minutes = serializers.IntegerField(required=False, default=60, min_value=1, max_value=1440,
                                              help_text="the width of each chart bucket, in minutes")


class ServingFiguresSerializer(serializers.Serializer):
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    error_rate = serializers.FloatField(allow_null=True)
    ttft_p50_s = serializers.FloatField(allow_null=True)
    ttft_p99_s = serializers.FloatField(allow_null=True)
    latency_p50_s = serializers.FloatField(allow_null=True)
    latency_p99_s = serializers.FloatField(allow_null=True)
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    tokens_per_s = serializers.FloatField(allow_null=True)
    worker_seconds = serializers.FloatField()
    cost = serializers.FloatField(allow_null=True, help_text="tokens in and out priced at SERVING_PRICE_PER_1K_TOKENS")


class ServingLineSerializer(ServingFiguresSerializer):
    version = serializers.IntegerField()
    version_name = serializers.CharField()
    alias = serializers.CharField(allow_null=True)
    quality = serializers.FloatField(allow_null=True, help_text="the mean score (0-1) the alias's quality judge "
                                                                "gave this version's captured answers")
    judged = serializers.IntegerField(help_text="answers the quality judge scored in the window")


class ServingPointSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    latency_p99_s = serializers.FloatField(allow_null=True)
    ttft_p99_s = serializers.FloatField(allow_null=True)
    tokens_per_s = serializers.FloatField(allow_null=True)


class ServingSeriesSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    version_name = serializers.CharField()
    points = ServingPointSerializer(many=True)


class ServingMetricsSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    bucket_minutes = serializers.IntegerField()
    sampled = serializers.BooleanField(help_text="true when the window held more generations than are read")
    price_per_1k_tokens = serializers.FloatField(allow_null=True)
    lines = ServingLineSerializer(many=True)
    series = ServingSeriesSerializer(many=True)


class CaptureSettingsSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="log this alias's /v1 requests and answers")
    sample_rate = serializers.FloatField(required=False, allow_null=True, default=None,
                                         help_text="the share of requests kept, above 0 and at most 1")
    retention_days = serializers.IntegerField(required=False, allow_null=True, default=None,
                                              help_text="captures are deleted after this many days")
    redact = serializers.BooleanField(required=False, allow_null=True, default=None,
                                      help_text="replace personal data before anything is stored")


class CaptureSettingsOutSerializer(serializers.ModelSerializer):
    enabled = serializers.BooleanField(source="capture_enabled")
    sample_rate = serializers.FloatField(source="capture_sample_rate")
    retention_days = serializers.IntegerField(source="capture_retention_days")
    redact = serializers.BooleanField(source="capture_redact")

    class Meta:
        model = ModelAlias
        fields = ["name", "enabled", "sample_rate", "retention_days", "redact"]


class CaptureFilterSerializer(serializers.Serializer):
    version = serializers.IntegerField(required=False, allow_null=True, default=None)
    since = serializers.DateTimeField(required=False, allow_null=True, default=None)
    until = serializers.DateTimeField(required=False, allow_null=True, default=None)
    feedback = serializers.ChoiceField(choices=["any", "with", "without", "positive", "negative"], required=False,
                                       default="any")


class CapturesToDatasetSerializer(CaptureFilterSerializer):
    dataset = serializers.IntegerField(help_text="a dataset of the project: the captures become its next version")
    message = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class CaptureSerializer(serializers.ModelSerializer):
    class Meta:
        model = Capture
        fields = ["id", "completion_id", "choice_index", "version", "messages", "response", "redacted", "redactions", "latency_s",
                  "time_to_first_token_s", "prompt_tokens", "completion_tokens", "feedback_score",
                  "feedback_comment", "feedback_at", "created_at"]


class ImportQueuedSerializer(serializers.Serializer):
    import_job = serializers.IntegerField()
    dataset = serializers.IntegerField()
    captures = serializers.IntegerField()


class _Text(serializers.CharField):
    """A JSON string only: CharField would take 3 as "3", and a number sent for a text is a client's bug."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class ClassifyRequestSerializer(serializers.Serializer):
    texts = serializers.ListField(
        child=_Text(max_length=MAX_CLASSIFY_CHARS, trim_whitespace=False),
        min_length=1, max_length=MAX_CLASSIFY_TEXTS,
        help_text=f"the texts to classify: 1 to {MAX_CLASSIFY_TEXTS}, each at most {MAX_CLASSIFY_CHARS} characters")


class ClassificationResultSerializer(serializers.Serializer):
    label = serializers.CharField(help_text="the most probable class")
    labels = serializers.ListField(child=serializers.CharField(), required=False,
                                   help_text="the predicted classes: the most probable one, or for a multi-label "
                                             "classifier every class above 0.5 (none, one or several)")
    probabilities = serializers.DictField(child=serializers.FloatField(),
                                          help_text="each class's probability (multi-label: each on its own)")
    confidence = serializers.FloatField(required=False, help_text="the top probability; multi-label: max(p, 1 - p) "
                                                                  "of its least sure class")


class ClassificationSerializer(serializers.ModelSerializer):
    results = ClassificationResultSerializer(many=True, read_only=True, allow_null=True,
                                             help_text="one per text, in their order, once succeeded")
    count = serializers.SerializerMethodField()

    class Meta:
        model = Classification
        fields = ["id", "model", "state", "count", "results", "error", "created_at", "finished_at"]

    def get_count(self, job) -> int:
        """texts in the request"""
        return len(job.texts)
