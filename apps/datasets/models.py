from django.conf import settings
from django.db import models
from django.db.models.functions import Lower

from apps.core.jobs import LeasedJob
from apps.projects.permissions import object_permission_choices
from workers.ingest import export_formats


class LiveDatasetManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(deleted_at__isnull=True)


class Dataset(models.Model):
    """A named collection of immutable versions inside a project."""

    objects = LiveDatasetManager()
    all_objects = models.Manager()

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True, max_length=5000)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)  # soft delete: versions may be pinned by jobs

    class Meta:
        ordering = ["name", "id"]
        default_permissions = ()
        permissions = object_permission_choices("dataset")
        constraints = [models.UniqueConstraint(Lower("name"), "project", name="unique_dataset_name_per_project")]
        # Serves the per-project list in name order without sorting all of it (bench: policy_scale).
        indexes = [models.Index(fields=["project", "name", "id"])]

    def __str__(self) -> str:
        return self.name


class DatasetVersion(models.Model):
    """An immutable snapshot of a dataset's rows. Every change makes a new one."""

    class Status(models.TextChoices):
        BUILDING = "building"  # rows are being written; invisible everywhere
        READY = "ready"
        PURGED = "purged"  # rows deleted for good; the row stays as a record in the history

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.BUILDING)
    content_hash = models.CharField(max_length=64, blank=True)
    row_count = models.PositiveIntegerField(default=0)
    schema = models.JSONField(default=dict)  # {"roles": {column: role}, "metadata_keys": [...]}
    stats = models.JSONField(default=dict)  # workers.ingest.stats.VersionStats, computed as rows are written
    message = models.CharField(max_length=500, blank=True)
    source = models.JSONField(default=dict)  # how it was made: import file, format, mapping
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    purged_at = models.DateTimeField(null=True, blank=True)
    # When its rows' full-text search index was built (PostgreSQL: apps.datasets.search_index);
    # None: not yet, a search scans the rows.
    search_indexed_at = models.DateTimeField(null=True, blank=True)
    purged_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")

    class Meta:
        ordering = ["-number"]
        constraints = [models.UniqueConstraint(fields=["dataset", "number"], name="unique_version_number")]

    def __str__(self) -> str:
        return f"{self.dataset.name} v{self.number}"

    @property
    def project(self):
        return self.dataset.project


class DatasetRow(models.Model):
    """One row of one version. Rows never change: edits make a new version with new rows."""

    # No index of its own: the (version, position) unique index serves lookups by version.
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="rows", db_index=False)
    position = models.PositiveIntegerField()  # 0-based order within the version; keyset pagination key
    row_hash = models.CharField(max_length=64)
    ext_id = models.CharField(max_length=200, null=True, blank=True)
    prompt = models.TextField(null=True, blank=True)
    response = models.TextField(null=True, blank=True)
    messages = models.JSONField(null=True, blank=True)
    label = models.CharField(max_length=200, null=True, blank=True)
    reference = models.TextField(null=True, blank=True)
    metadata = models.JSONField(default=dict)
    split = models.CharField(max_length=16, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "position"], name="unique_row_position")]
        # Only rows that have a split are in the split index: an import (no splits yet) writes
        # none of its rows into it, and a filter on a split never looks for "".
        # A diff between two versions probes the other version for each row's content hash (and
        # split: the probe reads the index alone) and, for rows not in the other version, for its
        # id; only rows with an id are in the id index.
        indexes = [models.Index(fields=["version", "label"]),
                   models.Index(fields=["version", "split"], condition=~models.Q(split=""), name="datasets_row_split"),
                   models.Index(fields=["version", "row_hash", "split"], name="datasets_row_hash"),
                   models.Index(fields=["version", "ext_id"], condition=models.Q(ext_id__isnull=False),
                                name="datasets_row_ext_id")]


class ImportJob(LeasedJob):
    """An import from an uploaded or server-side file into a new version, run by Celery under a
    lease (apps.core.jobs): a redelivered message never restarts an import a live worker runs."""

    class State(models.TextChoices):
        DRAFT = "draft"  # uploaded, waiting for the column mapping
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ACTIVE = (State.QUEUED, State.RUNNING)
    ENDED = (State.SUCCEEDED, State.FAILED, State.CANCELLED)
    TASK, QUEUE = "datasets.import", "default"
    DONE_FIELD = "rows_done"

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="imports")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=16, choices=State.choices, default=State.DRAFT)
    cancel_requested = models.BooleanField(default=False)
    filename = models.CharField(max_length=255)
    artifact_sha256 = models.CharField(max_length=64, blank=True)
    server_path = models.CharField(max_length=1000, blank=True)  # an HF datasets directory inside DATA_ROOTS
    size_bytes = models.BigIntegerField()
    source_format = models.JSONField(default=dict)
    mapping = models.JSONField(default=dict)
    options = models.JSONField(default=dict)
    message = models.CharField(max_length=500, blank=True)
    rows_done = models.PositiveIntegerField(default=0)
    rows_total_estimate = models.PositiveIntegerField(null=True, blank=True)
    bad_rows = models.JSONField(default=list)
    version = models.OneToOneField(DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="import_job")

    def __str__(self) -> str:
        return f"import of {self.filename} into {self.dataset}"

    @property
    def project(self):
        return self.dataset.project


class DeriveJob(LeasedJob):
    """A new version made from an existing one by the worker (splits, redactions, edits, PII scans,
    token stats, purges), under the jobs lease (apps.core.jobs)."""

    class Kind(models.TextChoices):
        SPLIT = "split", "Split"
        PII_SCAN = "pii_scan", "PII scan"  # reads only: its report is the result, no new version
        REDACT = "redact", "Redaction"
        EDIT = "edit", "Edit"  # rows fixed or dropped in the browser or the API
        TOKEN_STATS = "token_stats", "Token lengths"  # reads only: histograms with a model's tokenizer
        PURGE = "purge", "Purge"  # deletes the parent's rows for good; no new version

    REPORT_KINDS = (Kind.PII_SCAN, Kind.TOKEN_STATS, Kind.PURGE)  # no new version comes out of these

    State = ImportJob.State
    ENDED = ImportJob.ENDED
    TASK, QUEUE = "datasets.derive", "default"
    DONE_FIELD = "rows_done"

    parent = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="derive_jobs")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    params = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=ImportJob.State.choices, default=ImportJob.State.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    rows_done = models.PositiveIntegerField(default=0)
    result = models.JSONField(default=dict)  # e.g. the PII scan report
    version = models.OneToOneField(DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="derive_job")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    @property
    def dataset(self):
        return self.parent.dataset


class ExportJob(LeasedJob):
    """A version written to a file by a worker (any format, any size), downloaded when done; under
    the jobs lease (apps.core.jobs), so a lost worker's export is written again by another."""

    State = ImportJob.State
    ENDED = ImportJob.ENDED
    TASK, QUEUE = "datasets.export", "default"
    DONE_FIELD = "rows_done"

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="exports")
    format = models.CharField(max_length=16, choices=export_formats.choices())  # workers.ingest.export_formats
    state = models.CharField(max_length=16, choices=ImportJob.State.choices, default=ImportJob.State.QUEUED)
    rows_done = models.PositiveIntegerField(default=0)
    path = models.CharField(max_length=1000, blank=True)  # the finished file, under ARTIFACT_ROOT/exports
    size_bytes = models.BigIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta(LeasedJob.Meta):
        default_permissions = ()

    @property
    def dataset(self):
        return self.version.dataset

    @property
    def project(self):
        return self.version.dataset.project

    @property
    def filename(self) -> str:
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.version.dataset.name)[:80]
        return f"{name}-v{self.version.number}.{export_formats.EXPORT_FORMATS[self.format].extension}"


class SearchIndexJob(LeasedJob):
    """A worker's build of one large version's full-text search index (PostgreSQL:
    apps.datasets.search_index), under the jobs lease (apps.core.jobs). Its id is its version's: the
    task's one argument was the version id before builds were rows and stays so (messages queued
    then stay valid), and a version has one build; asking again for a dropped index queues it again."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    ENDED = (State.SUCCEEDED, State.FAILED)
    TASK, QUEUE = "datasets.index_search", "default"

    version = models.OneToOneField(DatasetVersion, primary_key=True, on_delete=models.CASCADE,
                                   related_name="search_index_job")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)

    class Meta(LeasedJob.Meta):
        default_permissions = ()
        ordering = []  # one row per campaign/version, keyed by it: nothing to order
