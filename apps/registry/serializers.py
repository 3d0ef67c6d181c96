from rest_framework import serializers

from apps.projects.serializers import ManagerOnlyFieldsMixin
from apps.registry.models import RegisteredModel


class ModelSerializer(ManagerOnlyFieldsMixin, serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)
    # Where the weights live on the server: for those who may register models.
    manage_permission = "model.register"
    manager_only = ("source_path",)
    manager_only_info = ("path",)

    class Meta:
        model = RegisteredModel
        fields = ["id", "project", "name", "kind", "format", "status", "base_model", "source_path", "info", "lineage",
                  "error", "created_at"]


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
