import dataclasses
import typing

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.projects.serializers import ManagerOnlyFieldsMixin
from apps.training import selectors
from apps.training.models import MetricPoint, Sweep, TrainingJob


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
    waiting_reason = serializers.SerializerMethodField(help_text="why a queued job cannot start now: no online "
                                                                 "training worker has the devices it needs")
    priority = serializers.CharField(source="get_priority_display", read_only=True)

    class Meta:
        model = TrainingJob
        fields = ["id", "project", "name", "method", "priority", "state", "queue_position", "waiting_reason", "cancel_requested", "base_model",
                  "dataset_version", "train_split", "eval_split", "config", "current_step", "total_steps",
                  "checkpoint_step", "tokens_trained", "runs", "worker", "heartbeat_at", "info", "metrics", "error", "traceback", "log_tail",
                  "adapter", "parent", "created_by", "created_at", "started_at", "finished_at"]

    def get_queue_position(self, job: TrainingJob) -> int | None:
        return selectors.queue_position(job)

    def get_waiting_reason(self, job: TrainingJob) -> str:
        from apps.training.capacity import waiting_reason

        return waiting_reason(job)


def config_schema(config_class: type | None = None) -> dict:
    """The OpenAPI schema of a TrainConfig object, from the fields' metadata (workers.training.config.option):
    the same labels, ranges and choices the launch form shows and TrainConfig.validate checks (the
    service validates: its errors name `config.<field>`)."""
    from workers.training import TrainConfig

    config_class = config_class or TrainConfig
    hints, defaults = typing.get_type_hints(config_class), config_class()
    properties = {}
    for f in dataclasses.fields(config_class):
        meta, kind = f.metadata, hints[f.name]
        kinds = typing.get_args(kind) or (kind,)
        if list in {typing.get_origin(k) for k in kinds}:
            item = {"type": "array", "items": {"type": "string"}}
            prop = {"oneOf": [{"type": "string", "enum": [v for v, _ in meta["choices"]]}, item]} \
                if meta.get("choices") else item
        elif meta.get("choices"):
            prop = {"type": "string", "enum": [v for v, _ in meta["choices"]]}
        else:
            prop = {"type": {bool: "boolean", int: "integer", float: "number"}.get(kinds[0], "string")}
        if type(None) in kinds:
            prop["nullable"] = True
        for bound, exclusive in (("min", "exclusiveMinimum"), ("max", "exclusiveMaximum")):
            if meta.get(bound) is not None:
                prop["minimum" if bound == "min" else "maximum"] = meta[bound]
                if meta.get(f"{bound}_exclusive"):
                    prop[exclusive] = True
        prop["description"] = ": ".join(filter(None, [meta.get("label", ""), meta.get("help", "")]))
        prop["default"] = getattr(defaults, f.name)
        properties[f.name] = prop
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "description": "workers.training.TrainConfig fields; omitted ones take their defaults"}


@extend_schema_field(config_schema())
class ConfigField(serializers.DictField):
    """A TrainConfig as a JSON object, checked by the service (TrainConfig.validate)."""


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
    config = ConfigField(required=False, default=dict,
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


SPACE_SCHEMA = {"type": "object", "additionalProperties": {"oneOf": [
    {"type": "array", "items": {"type": "number"}},
    {"type": "object", "properties": {"min": {"type": "number"}, "max": {"type": "number"}, "log": {"type": "boolean"}}}]}}


@extend_schema_field(SPACE_SCHEMA)
class SpaceField(serializers.JSONField):
    """A sweep's space, checked by the service (apps.training.sweeps.checked_space)."""


class SweepLaunchSerializer(JobLaunchSerializer):
    """A sweep: the inputs of a launch (shared by every job) and what it varies."""

    strategy = serializers.CharField(help_text="grid (every combination) or random (a seeded sample)")
    space = SpaceField(help_text='{option: [values]}; for random also {option: {"min", "max", "log"}}. '
                                            "Options: learning_rate, lora_r, lora_alpha, epochs, batch_size")
    max_jobs = serializers.IntegerField(help_text="K: the most jobs the sweep launches (a grid must fit in it)")
    seed = serializers.IntegerField(required=False, default=0, help_text="of the random sample")


class SweepTrialSerializer(serializers.Serializer):
    rank = serializers.IntegerField(allow_null=True, help_text="by the sweep's objective, best first; null: none yet")
    score = serializers.FloatField(allow_null=True, help_text="the job's value of the sweep's objective")
    job = serializers.IntegerField()
    name = serializers.CharField()
    state = serializers.CharField()
    eval_loss = serializers.FloatField(allow_null=True)
    point = serializers.DictField(help_text="the swept options' values")
    current_step = serializers.IntegerField()
    total_steps = serializers.IntegerField(allow_null=True)
    adapter = serializers.IntegerField(allow_null=True)


class SweepSerializer(serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)
    base_model = serializers.IntegerField(source="base_model_id", read_only=True)
    dataset_version = serializers.IntegerField(source="dataset_version_id", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True, allow_null=True)
    priority = serializers.CharField(source="get_priority_display", read_only=True)
    state = serializers.SerializerMethodField()
    space = SpaceField(read_only=True)
    base_config = serializers.DictField(read_only=True, help_text="the config every job shares, before its point")
    trials = serializers.SerializerMethodField()
    objective = serializers.SerializerMethodField(
        help_text="what the trials are ranked by: eval_macro_f1 (highest first) for classifiers, else eval_loss "
                  "(lowest first)")

    class Meta:
        model = Sweep
        fields = ["id", "project", "name", "strategy", "space", "seed", "max_jobs", "base_model", "dataset_version",
                  "train_split", "eval_split", "base_config", "priority", "state", "estimated_gpu_hours",
                  "cancelled_at", "created_by", "created_at", "objective", "trials"]

    def get_state(self, sweep) -> str:
        return selectors.sweep_state(sweep)

    def get_objective(self, sweep) -> str:
        return selectors.sweep_objective(sweep)

    @extend_schema_field(SweepTrialSerializer(many=True))
    def get_trials(self, sweep) -> list[dict]:
        return selectors.sweep_trials(sweep)
