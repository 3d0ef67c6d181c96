from rest_framework import serializers

from apps.projects.serializers import ManagerOnlyFieldsMixin
from apps.registry.models import (
    CatalogueModel,
    ModelAlias,
    ModelExport,
    PrecisionMeasurement,
    RegisteredModel,
    ServingPrecision,
)
from apps.registry.selectors import precision_table


class ModelSerializer(ManagerOnlyFieldsMixin, serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)
    # Where the weights live on the server: for those who may register models.
    manage_permission = "model.register"
    manager_only = ("source_path",)
    manager_only_info = ("path",)

    class Meta:
        model = RegisteredModel
        fields = ["id", "project", "name", "kind", "format", "status", "base_model", "catalogue", "shared_from",
                  "source_path", "info", "lineage", "error", "serving_precision", "created_at"]
        read_only_fields = ["serving_precision"]


class ModelRegisterSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    path = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="",
                                 help_text="a safetensors directory or a .gguf file inside the configured model "
                                           "roots (MODEL_ROOTS)")
    hub_id = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                   help_text="instead of a path: a Hugging Face id (org/name) from this server's "
                                             "local Hugging Face cache")
    revision = serializers.CharField(max_length=128, required=False, allow_blank=True, default="",
                                     help_text="with hub_id: a branch, tag or commit (default main)")


class MemoryEstimateQuerySerializer(serializers.Serializer):
    precision = serializers.ChoiceField(choices=["bf16", "fp16", "fp32"], default="bf16")
    batch_size = serializers.IntegerField(min_value=1, max_value=4096, default=1)
    seq_len = serializers.IntegerField(min_value=1, max_value=1_000_000, default=512)
    lora_rank = serializers.IntegerField(min_value=1, max_value=1024, default=16)
    mode = serializers.ChoiceField(choices=["inference", "lora"], default="inference")


class ModelMergeSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120, required=False, allow_blank=True, default="",
                                 help_text="the merged model's name (default: the adapter's, merged)")


class CatalogueModelSerializer(serializers.ModelSerializer):
    """A catalogue model as site admins see it (with where its files lie)."""

    class Meta:
        model = CatalogueModel
        fields = ["id", "name", "format", "status", "source_path", "info", "content_hash", "error", "default_enabled",
                  "created_at"]


class CatalogueRegisterSerializer(ModelRegisterSerializer):
    default_enabled = serializers.BooleanField(default=False, help_text="enabled in every project created from now on")


class CatalogueUploadSerializer(serializers.Serializer):
    """multipart/form-data: the name, then each file under `files`."""

    name = serializers.CharField(max_length=120)
    files = serializers.ListField(child=serializers.FileField(allow_empty_file=False), allow_empty=False,
                                  help_text=".safetensors weights with config.json and tokenizer files, or one .gguf")
    default_enabled = serializers.BooleanField(default=False, help_text="enabled in every project created from now on")


class CatalogueUpdateSerializer(serializers.Serializer):
    default_enabled = serializers.BooleanField()


class ProjectCatalogueSerializer(serializers.Serializer):
    """A catalogue model as a project sees it: whether it is enabled here, and as which model."""

    id = serializers.IntegerField(source="entry.id")
    name = serializers.CharField(source="entry.name")
    format = serializers.CharField(source="entry.format")
    status = serializers.CharField(source="entry.status")
    info = serializers.JSONField(source="entry.info")
    enabled = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField(help_text="the project's model row of it, when enabled")

    def get_enabled(self, item) -> bool:
        return item["model"] is not None and item["model"].deleted_at is None

    def get_model(self, item) -> int | None:
        return item["model"].pk if self.get_enabled(item) else None


class CatalogueEnableSerializer(serializers.Serializer):
    catalogue_model = serializers.IntegerField(help_text="the catalogue model to enable in this project")


class ShareSerializer(serializers.Serializer):
    project = serializers.IntegerField(source="project_id", help_text="the project the adapter is shared with")
    project_name = serializers.CharField(source="project.name", read_only=True)
    model = serializers.IntegerField(source="pk", read_only=True, help_text="its model row in that project")


class AliasSerializer(serializers.ModelSerializer):
    ref = serializers.SerializerMethodField(help_text="what clients ask for: name@alias")
    model_name = serializers.CharField(source="model.name", read_only=True)
    version_name = serializers.CharField(source="version.name", read_only=True)
    updated_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ModelAlias
        fields = ["name", "ref", "model", "model_name", "version", "version_name", "protected", "canary_version",
                  "canary_weight", "updated_by", "updated_at"]

    def get_ref(self, alias) -> str:
        return f"{alias.model.name}@{alias.name}"


class AliasSetSerializer(serializers.Serializer):
    version = serializers.IntegerField(help_text="the model version the alias points at: the model itself, one of "
                                                 "its adapters or a model merged from one")
    protected = serializers.BooleanField(required=False, allow_null=True, default=None,
                                         help_text="only holders of model.promote move a protected alias")


class ModelExportStartSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=ModelExport.Format.choices,
                                     help_text="safetensors (the merged model, zipped), gguf-f16 or gguf-q8_0 "
                                               "(one GGUF file for llama.cpp and Ollama; Llama models)")


class ModelExportSerializer(serializers.ModelSerializer):
    check = serializers.JSONField(source="check_result", read_only=True,
                                  help_text="the load-back check: greedy tokens of the exported model against the "
                                            "model it came from (agreement, identical, prompts, method)")
    download = serializers.SerializerMethodField()

    class Meta:
        model = ModelExport
        fields = ["id", "model", "format", "state", "steps_done", "steps_total", "size_bytes", "write_seconds",
                  "check", "error", "download", "created_at", "finished_at"]

    def get_download(self, job) -> str | None:
        return f"/api/model-exports/{job.pk}/download/" if job.state == ModelExport.State.SUCCEEDED else None


class ModelUpdateSerializer(serializers.Serializer):
    serving_precision = serializers.ChoiceField(
        choices=ServingPrecision.choices,
        help_text="what the inference workers load the model in; auto: the fastest precision of the latest "
                  "measurement whose perplexity is within 2% of fp32's (fp32 on a CPU, bf16 on a GPU until measured)")


class PrecisionMeasurementSerializer(serializers.ModelSerializer):
    results = serializers.SerializerMethodField(
        help_text="per precision: tokens_per_s (decode, greedy), perplexity (on the fixed reference text), "
                  "delta_perplexity_pct and speedup against fp32, load_s, error (why it was not measured)")

    class Meta:
        model = PrecisionMeasurement
        fields = ["id", "model", "state", "steps_done", "steps_total", "device", "results", "error", "created_at",
                  "finished_at"]

    def get_results(self, job) -> list[dict]:
        return precision_table(job.results)
