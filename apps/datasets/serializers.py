from rest_framework import serializers

from apps.datasets.models import Dataset, DatasetRow, DatasetVersion, DeriveJob, ExportJob, ImportJob
from workers.ingest.export_formats import EXPORT_FORMATS


class DatasetSerializer(serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)

    class Meta:
        model = Dataset
        fields = ["id", "project", "name", "description", "created_at"]


class DatasetCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)


class VersionSerializer(serializers.ModelSerializer):
    parent = serializers.IntegerField(source="parent.number", read_only=True, allow_null=True, default=None)
    author = serializers.CharField(source="author.username", read_only=True, allow_null=True, default=None)

    class Meta:
        model = DatasetVersion
        fields = ["id", "number", "parent", "status", "content_hash", "row_count", "schema", "message", "author",
                  "created_at", "purged_at"]


class RowSerializer(serializers.ModelSerializer):
    class Meta:
        model = DatasetRow
        fields = ["position", "ext_id", "prompt", "response", "messages", "label", "reference", "metadata", "split",
                  "row_hash"]


class ImportSerializer(serializers.ModelSerializer):
    version = serializers.IntegerField(source="version.number", read_only=True, allow_null=True, default=None)

    class Meta:
        model = ImportJob
        fields = ["id", "state", "filename", "size_bytes", "source_format", "mapping", "options", "message",
                  "rows_done", "rows_total_estimate", "bad_rows", "error", "version", "created_at", "started_at",
                  "finished_at"]


class ImportCreateSerializer(serializers.Serializer):
    file = serializers.FileField(required=False)
    server_path = serializers.CharField(required=False, max_length=1000)


class ImportStartSerializer(serializers.Serializer):
    mapping = serializers.DictField(child=serializers.CharField(allow_blank=True, max_length=20))
    skip_bad_rows = serializers.BooleanField(default=False)
    delimiter = serializers.CharField(required=False, allow_null=True, max_length=1, trim_whitespace=False)
    has_header = serializers.BooleanField(required=False, allow_null=True, default=None)
    message = serializers.CharField(required=False, allow_blank=True, max_length=500)


class SplitSerializer(serializers.Serializer):
    ratios = serializers.DictField(child=serializers.FloatField(min_value=0, max_value=1),
                                   help_text="e.g. {\"train\": 0.8, \"validation\": 0.1, \"test\": 0.1}")
    seed = serializers.IntegerField(default=0, min_value=0, max_value=2**31 - 1)
    stratify = serializers.BooleanField(default=True, help_text="by label, when the rows have labels")
    message = serializers.CharField(required=False, allow_blank=True, max_length=500)


class EditSerializer(serializers.Serializer):
    edits = serializers.DictField(child=serializers.DictField(allow_empty=False), required=False, default=dict,
                                  help_text="{position: {field: new text or null}}; fields prompt, response, "
                                            "reference, label")
    drops = serializers.ListField(child=serializers.IntegerField(min_value=0), required=False, default=list,
                                  help_text="positions of rows to drop")
    message = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class DeriveJobSerializer(serializers.ModelSerializer):
    parent = serializers.IntegerField(source="parent.number", read_only=True)
    version = serializers.IntegerField(source="version.number", read_only=True, allow_null=True, default=None)

    class Meta:
        model = DeriveJob
        fields = ["id", "kind", "params", "state", "rows_done", "error", "result", "parent", "version", "created_at",
                  "finished_at"]


class VersionExportStartSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=list(EXPORT_FORMATS))


class ExportJobSerializer(serializers.ModelSerializer):
    version = serializers.IntegerField(source="version.number", read_only=True)
    dataset = serializers.IntegerField(source="version.dataset_id", read_only=True)
    rows_total = serializers.IntegerField(source="version.row_count", read_only=True)
    download = serializers.SerializerMethodField()

    class Meta:
        model = ExportJob
        fields = ["id", "dataset", "version", "format", "state", "rows_done", "rows_total", "size_bytes", "error",
                  "download", "created_at", "finished_at"]

    def get_download(self, job) -> str | None:
        return f"/api/dataset-exports/{job.pk}/download/" if job.state == "succeeded" else None
