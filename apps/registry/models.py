from django.conf import settings
from django.db import models
from django.db.models.functions import Lower

from apps.projects.permissions import object_permission_choices


class LiveModelManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(deleted_at__isnull=True)


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
    base_model = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="adapters")
    # An adapter's lineage: the job that made it, its dataset version (id, hash), config and final metrics.
    lineage = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
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
