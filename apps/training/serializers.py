from rest_framework import serializers

from apps.projects.serializers import ManagerOnlyFieldsMixin
from apps.training import selectors
from apps.training.models import MetricPoint, TrainingJob


class JobSerializer(ManagerOnlyFieldsMixin, serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)
    # The traceback (server paths, library internals) for those who launch jobs; everyone sees `error`.
    manage_permission = "job.launch"
    manager_only = ("traceback",)
    base_model = serializers.IntegerField(source="base_model_id", read_only=True)
    dataset_version = serializers.IntegerField(source="dataset_version_id", read_only=True)
    adapter = serializers.IntegerField(source="adapter_id", read_only=True, allow_null=True)
    parent = serializers.IntegerField(source="parent_id", read_only=True, allow_null=True)
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True, allow_null=True)
    queue_position = serializers.SerializerMethodField()
    priority = serializers.CharField(source="get_priority_display", read_only=True)

    class Meta:
        model = TrainingJob
        fields = ["id", "project", "name", "method", "priority", "state", "queue_position", "cancel_requested", "base_model",
                  "dataset_version", "train_split", "eval_split", "config", "current_step", "total_steps",
                  "checkpoint_step", "tokens_trained", "runs", "worker", "heartbeat_at", "info", "metrics", "error", "traceback", "log_tail",
                  "adapter", "parent", "created_by", "created_at", "started_at", "finished_at"]

    def get_queue_position(self, job: TrainingJob) -> int | None:
        return selectors.queue_position(job)


class JobLaunchSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    priority = serializers.ChoiceField(choices=["low", "normal", "high"], required=False, default="normal",
                                       help_text="high needs project.edit (project admins)")
    base_model = serializers.IntegerField(min_value=1)
    dataset_version = serializers.IntegerField(min_value=1, required=False,
                                               help_text="the version's id; or give dataset and version instead")
    dataset = serializers.IntegerField(min_value=1, required=False, help_text="with version: the dataset's id")
    version = serializers.IntegerField(min_value=1, required=False,
                                       help_text="with dataset: the version's number, as in its URLs")
    train_split = serializers.CharField(max_length=16, required=False, allow_blank=True, default="")
    eval_split = serializers.CharField(max_length=16, required=False, allow_blank=True, default="")
    config = serializers.DictField(required=False, default=dict,
                                   help_text="workers.training.TrainConfig fields; omitted ones take their defaults")

    def validate(self, data):
        pair = ("dataset" in data, "version" in data)
        if "dataset_version" in data:
            if any(pair):
                raise serializers.ValidationError({"dataset_version": "Give dataset_version, or dataset and version, "
                                                                      "not both."})
        elif pair != (True, True):
            raise serializers.ValidationError({"version" if pair[0] else "dataset": "Name the data: dataset_version "
                                               "(an id), or dataset and version (its number)."})
        return data


class JobCopySerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")
    dataset_version = serializers.IntegerField(min_value=1, required=False)
    train_split = serializers.CharField(max_length=16, required=False, allow_blank=True)
    eval_split = serializers.CharField(max_length=16, required=False, allow_blank=True)
    config = serializers.DictField(required=False, default=dict, help_text="overrides of the original's config")


class MetricPointSerializer(serializers.ModelSerializer):
    class Meta:
        model = MetricPoint
        fields = ["kind", "step", "values", "recorded_at"]


class MetricsQuerySerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["", *MetricPoint.Kind.values], required=False, default="")
