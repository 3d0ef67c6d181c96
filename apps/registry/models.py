from django.conf import settings
from django.db import models
from django.db.models.functions import Lower

from apps.core.jobs import ACTIVE_STATES, ENDED_STATES, JobState, LeasedJob
from apps.projects.permissions import object_permission_choices


class LiveModelManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(deleted_at__isnull=True)


class CatalogueModel(models.Model):
    """A base model of the whole site, registered once by a site admin (from the model roots or
    the local Hugging Face cache). A project uses it once its admins enable it: the project gets a
    RegisteredModel row pointing at the same weights (`catalogue`), nothing is copied.

    The fields a worker fills in (status, info, weights_path, content_hash) mirror RegisteredModel's
    and are copied onto every project's row when they change (`catalogue_sync`)."""

    name = models.CharField(max_length=120)
    format = models.CharField(max_length=16)
    source_path = models.CharField(max_length=1000)
    weights_path = models.CharField(max_length=1000, blank=True)
    status = models.CharField(max_length=16)
    info = models.JSONField(default=dict)
    content_hash = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)
    # Enabled in every project created from now on (the demo model is).
    default_enabled = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        default_permissions = ()
        constraints = [models.UniqueConstraint(Lower("name"), name="unique_catalogue_model_name")]

    def __str__(self) -> str:
        return self.name


class ServingPrecision(models.TextChoices):
    AUTO = "auto", "auto (the fastest measured within the perplexity allowance)"
    FP32 = "fp32"
    BF16 = "bf16"
    INT8 = "int8", "int8 (weight quantized linear layers)"


class RegisteredModel(models.Model):
    """A base model registered in a project: inspected by a worker after registration,
    loadable when READY.

    A GGUF file is converted once, in a worker, into a safetensors directory (`weights_path`);
    a Hugging Face safetensors directory is used where it lies. An adapter (kind ADAPTER) is a
    PEFT directory in artifact storage written by a fine-tune job, on top of `base_model`.
    """

    class Format(models.TextChoices):
        HF_DIR = "hf_dir"
        GGUF = "gguf"
        PEFT = "peft"  # a LoRA adapter directory on top of `base_model`

    class Kind(models.TextChoices):
        BASE = "base"
        ADAPTER = "adapter"

    class Status(models.TextChoices):
        CHECKING = "checking"  # registered; a worker reads its metadata
        CONVERTING = "converting"
        READY = "ready"
        FAILED = "failed"

    objects = LiveModelManager()
    all_objects = models.Manager()

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=120)
    format = models.CharField(max_length=16, choices=Format.choices)
    source_path = models.CharField(max_length=1000)
    weights_path = models.CharField(max_length=1000, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices)
    info = models.JSONField(default=dict)  # workers.models.ModelInfo.as_dict() (an adapter: its base's)
    # sha256 of the weight files (workers.models.weights_content_hash): what the weights are, wherever they
    # lie. Reading them takes a while, so a worker fills it in once ("" until then).
    content_hash = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.BASE)
    # RESTRICT, not PROTECT: a base goes only with its adapters (a project deleted whole takes both).
    base_model = models.ForeignKey("self", null=True, blank=True, on_delete=models.RESTRICT, related_name="adapters")
    # A catalogue model enabled in this project: the row shares the catalogue entry's weights.
    catalogue = models.ForeignKey(CatalogueModel, null=True, blank=True, on_delete=models.PROTECT,
                                  related_name="project_models")
    # An adapter shared from another project: this row is the grant's face in the receiving project
    # (same weights, the source's lineage plus `shared_from`).
    # (the source project deleted: the receiving project keeps its row, its lineage says where it came from)
    shared_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="shares")
    # An adapter's lineage: the job that made it, its dataset version (id, hash), config and final metrics.
    lineage = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    # Where the artifact bucket holds a copy of the weights (an apps.core.storage folder, written once they were
    # uploaded whole: a fine-tune's adapter, a merged model), for workers on machines without `weights_path`
    # (apps.registry.weights). "" when there is none.
    bucket_prefix = models.CharField(max_length=1000, blank=True)
    # What the inference workers load it in (workers.inference.precision); `auto` is what the latest
    # precision measurement says is fastest within the perplexity allowance (selectors.serving_precision).
    serving_precision = models.CharField(max_length=8, choices=ServingPrecision.choices,
                                         default=ServingPrecision.AUTO)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "id"]
        default_permissions = ()
        permissions = object_permission_choices("model")
        constraints = [models.UniqueConstraint(Lower("name"), "project", name="unique_model_name_per_project")]

    def __str__(self) -> str:
        return self.name


ALIAS_NAME = r"^[a-z0-9][a-z0-9._-]{0,47}$"


class ModelAlias(models.Model):
    """A project's name for one version of a model: `production`, `staging`, `team-a`. `model`
    is the name clients ask for (`<model name>@<alias>`), `version` the model or adapter served
    (the model itself or a version made from it). A bare model name means its `production` alias
    when it has one. Protected aliases move only for holders of `model.promote`."""

    PRODUCTION = "production"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="model_aliases")
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="aliases")
    name = models.CharField(max_length=48)
    # Models are soft-deleted (and refused while aliased); RESTRICT lets a whole project go at once.
    version = models.ForeignKey(RegisteredModel, on_delete=models.RESTRICT, related_name="aliased_as")
    protected = models.BooleanField(default=False)
    # A canary: `canary_weight` percent of end users (sticky: a hash of the caller) are served
    # `canary_version` instead of `version`. `rollout_steps` are the weights still to come, one per
    # `rollout_interval_s` while healthy; reaching 100 promotes it. A breach of a threshold, over
    # the canary's own requests since it started (`min_requests` at least), rolls it back.
    canary_version = models.ForeignKey(RegisteredModel, null=True, blank=True, on_delete=models.RESTRICT,
                                       related_name="canary_of")
    canary_weight = models.PositiveSmallIntegerField(default=0)
    canary_started_at = models.DateTimeField(null=True, blank=True)
    canary_stepped_at = models.DateTimeField(null=True, blank=True)
    rollout_steps = models.JSONField(default=list, blank=True)
    rollout_interval_s = models.PositiveIntegerField(default=0)
    max_error_rate = models.FloatField(null=True, blank=True)
    max_p99_latency_s = models.FloatField(null=True, blank=True)
    min_requests = models.PositiveIntegerField(default=20)
    # Quality: a calibrated pointwise judge of the project scores a sample of both versions' captured
    # answers (0..1, apps.evaluation.canary_judging); the canary's mean may fall at most
    # `max_quality_drop` below the stable version's, judged once each side has `min_requests` scores.
    # Its calls go out on behalf of `canary_started_by` (a provider judge's budget and `provider.use`).
    quality_judge = models.ForeignKey("evaluation.Judge", null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="canary_aliases")
    max_quality_drop = models.FloatField(null=True, blank=True)
    canary_started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                          on_delete=models.SET_NULL, related_name="+")
    # Request logging of the traffic through this alias (off by default): a `capture_sample_rate`
    # share of /v1 answers kept as captures (apps.serving.captures), personal data replaced at
    # capture when `capture_redact`, deleted after `capture_retention_days`.
    capture_enabled = models.BooleanField(default=False)
    capture_sample_rate = models.FloatField(default=1.0)
    capture_retention_days = models.PositiveIntegerField(default=30)
    capture_redact = models.BooleanField(default=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        default_permissions = ()
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="unique_alias_per_model"),
                       models.CheckConstraint(condition=models.Q(canary_weight__lte=100), name="canary_weight_percent")]

    def __str__(self) -> str:
        return f"{self.model.name}@{self.name}"

    @property
    def stable_weight(self) -> int:
        """The share of callers `version` serves (all of them without a canary)."""
        return 100 - self.canary_weight if self.canary_version_id else 100


class ModelExport(LeasedJob):
    """A model written by a worker as one downloadable file for deployment, then loaded back and
    checked (apps.registry.exports): an adapter is merged into its base first. Under the jobs
    lease (apps.core.jobs), so a lost worker's export is written again by another."""

    class Format(models.TextChoices):
        SAFETENSORS = "safetensors", "safetensors (the merged model, zipped)"
        GGUF_F16 = "gguf-f16", "GGUF f16"
        GGUF_Q8_0 = "gguf-q8_0", "GGUF q8_0"

    State = JobState
    ENDED = ENDED_STATES
    TASK, QUEUE = "registry.export", "default"
    DONE_FIELD, TOTAL_FIELD = "steps_done", "steps_total"

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="exports")
    format = models.CharField(max_length=16, choices=Format.choices)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    steps_done = models.PositiveIntegerField(default=0)
    steps_total = models.PositiveIntegerField(default=0)
    path = models.CharField(max_length=1000, blank=True)  # the finished file, under ARTIFACT_ROOT/model-exports
    size_bytes = models.BigIntegerField(null=True, blank=True)
    # The load-back check (workers.models.export_check.compare_greedy): agreement, identical, prompts, seconds.
    check_result = models.JSONField(default=dict, blank=True)
    write_seconds = models.FloatField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta(LeasedJob.Meta):
        default_permissions = ()

    @property
    def project(self):
        return self.model.project

    @property
    def filename(self) -> str:
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.model.name)[:80]
        if self.format == self.Format.SAFETENSORS:
            return f"{name}-merged.zip"
        return f"{name}-{self.format.removeprefix('gguf-')}.gguf"


class PrecisionMeasurement(LeasedJob):
    """A model measured by an inference worker in each serving precision (fp32, bf16, int8): decode
    tokens/s on fixed short prompts and perplexity on a fixed reference text
    (workers.inference.precision). An adapter is measured over its base; the latest succeeded
    measurement of a model is what its `auto` serving precision follows."""

    State = JobState
    ACTIVE, ENDED = ACTIVE_STATES, ENDED_STATES
    TASK, QUEUE = "registry.measure_precisions", "inference"
    DONE_FIELD, TOTAL_FIELD = "steps_done", "steps_total"

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="precision_measurements")
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    steps_done = models.PositiveIntegerField(default=0)
    steps_total = models.PositiveIntegerField(default=0)
    device = models.CharField(max_length=32, blank=True)  # where it was measured: the inference worker's device
    # [workers.inference.precision.Measurement.as_dict(), ...] in fp32, bf16, int8 order
    results = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta(LeasedJob.Meta):
        default_permissions = ()

    @property
    def project(self):
        return self.model.project
