from rest_framework import serializers

from apps.annotation.models import AnnotationExport, Campaign, LabelSchema


class LabelSchemaSerializer(serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)
    parent = serializers.IntegerField(source="parent_id", read_only=True, allow_null=True)

    class Meta:
        model = LabelSchema
        fields = ["id", "project", "name", "version", "parent", "fields", "created_at"]


class LabelSchemaWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120, required=False)
    fields = serializers.JSONField(help_text="the form's fields; their types: apps/annotation/field_types.py")


class CampaignSerializer(serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)
    dataset_version = serializers.IntegerField(source="dataset_version_id", read_only=True)
    schema = LabelSchemaSerializer(read_only=True)
    suggestion_model = serializers.IntegerField(source="suggestion_model_id", read_only=True, allow_null=True)
    assignees = serializers.SlugRelatedField(many=True, slug_field="username", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True, allow_null=True)
    suggestion_state = serializers.CharField(read_only=True, help_text='"" without model suggestions, else their run\'s state')
    suggestion_progress = serializers.DictField(read_only=True, help_text="done and total items, and an error if any")

    class Meta:
        model = Campaign
        fields = ["id", "project", "name", "state", "dataset_version", "schema", "selection", "guidelines", "overlap",
                  "assignment", "assignees", "due_at", "lease_seconds", "suggestion_model", "suggestion_state",
                  "suggestion_progress", "order", "item_count", "created_by", "created_at"]


class CampaignCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    dataset_version = serializers.IntegerField(min_value=1)
    schema = serializers.IntegerField(min_value=1)
    guidelines = serializers.CharField(max_length=50_000, required=False, allow_blank=True, default="")
    overlap = serializers.IntegerField(required=False, default=1)
    assignees = serializers.ListField(child=serializers.CharField(max_length=150), required=False, default=list,
                                      help_text="usernames; empty = every project annotator")
    due_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    lease_seconds = serializers.IntegerField(required=False, default=600)
    split = serializers.CharField(max_length=16, required=False, allow_blank=True, default="")
    label = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    meta_key = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                     help_text="only rows whose metadata field meta_key holds meta_value")
    meta_value = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")
    sample = serializers.IntegerField(required=False, allow_null=True, default=None)
    seed = serializers.IntegerField(required=False, default=0)
    suggestion_model = serializers.IntegerField(
        required=False, allow_null=True, default=None,
        help_text="a model that pre-fills answers: a generative one, or a classifier adapter whose classes are the "
                  "labels of a single-label field")
    order = serializers.ChoiceField(choices=Campaign.Order.choices, default=Campaign.Order.DEFAULT,
                                    help_text="uncertain_first: the classifier's least confident suggestions first")


class SubmitSerializer(serializers.Serializer):
    client_id = serializers.UUIDField(help_text="made by the client; a retry with the same id returns the first answer")
    values = serializers.JSONField(required=False, default=dict)
    comment = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False,
                                    max_length=5000)
    time_spent_ms = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=0,
                                             max_value=86_400_000)


class SkipSerializer(serializers.Serializer):
    client_id = serializers.UUIDField()


class DraftSerializer(serializers.Serializer):
    values = serializers.JSONField(required=False, default=dict)
    comment = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False,
                                    max_length=5000)


class EditSerializer(serializers.Serializer):
    revision = serializers.IntegerField(min_value=1, help_text="the revision you loaded")
    values = serializers.JSONField(required=False, default=None)
    comment = serializers.CharField(required=False, allow_blank=True, default=None, trim_whitespace=False,
                                    max_length=5000)


class ReviewSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["accept", "reject", "correct"])
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)
    values = serializers.JSONField(required=False, default=None, help_text="the corrected answer (correct)")


class ValuesSerializer(serializers.Serializer):
    values = serializers.JSONField(allow_null=True)


class ExportStartSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["resolved", "preferences"], default="resolved")
    mode = serializers.ChoiceField(choices=["majority", "adjudicated", "accepted"], default="majority")
    min_agreement = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0, max_value=1)
    dataset = serializers.IntegerField(required=False, allow_null=True, default=None)
    new_dataset_name = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")
    message = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class AnnotationExportSerializer(serializers.ModelSerializer):
    campaign = serializers.IntegerField(source="campaign_id", read_only=True)
    dataset = serializers.IntegerField(source="dataset_id", read_only=True)
    version = serializers.IntegerField(source="version_id", read_only=True, allow_null=True)
    version_number = serializers.IntegerField(source="version.number", default=None, read_only=True, allow_null=True)

    class Meta:
        model = AnnotationExport
        fields = ["id", "campaign", "kind", "mode", "min_agreement", "dataset", "new_dataset_name", "state", "rows",
                  "error", "version", "version_number", "created_at", "finished_at"]


class AnnotationPayloadSerializer(serializers.Serializer):
    """The shape of services.annotation_payload, for the schema of the lists that answer it."""

    id = serializers.IntegerField()
    item = serializers.IntegerField()
    annotator = serializers.CharField()
    values = serializers.JSONField()
    comment = serializers.CharField(allow_blank=True)
    skipped = serializers.BooleanField()
    revision = serializers.IntegerField()
    review = serializers.CharField()
    review_comment = serializers.CharField(allow_blank=True)
    reviewed_values = serializers.JSONField(allow_null=True)
    suggestion = serializers.JSONField(allow_null=True)
    time_spent_ms = serializers.IntegerField(allow_null=True)
    schema_version = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ReviewedAnnotationSerializer(AnnotationPayloadSerializer):
    in_words = serializers.JSONField()
    reviewed_in_words = serializers.JSONField()


class ReviewItemSerializer(serializers.Serializer):
    """The shape of selectors.review_payload: an answered item with every answer to it."""

    id = serializers.IntegerField()
    position = serializers.IntegerField()
    example = serializers.JSONField()
    is_gold = serializers.BooleanField()
    gold_values = serializers.JSONField(allow_null=True)
    suggestion = serializers.JSONField(allow_null=True)
    adjudicated_values = serializers.JSONField(allow_null=True)
    adjudicated_by = serializers.CharField(allow_null=True)
    annotations = ReviewedAnnotationSerializer(many=True)
