from django.conf import settings
from django.db import models

from apps.core.jobs import ENDED_STATES, JobState, LeasedJob


class LabelSchema(models.Model):
    """One version of an annotation form (apps/annotation/schema.py). Versions are immutable
    once answered: an edit after annotations exist makes version + 1 with this as parent."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="label_schemas")
    name = models.CharField(max_length=120)
    version = models.PositiveIntegerField(default=1)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    fields = models.JSONField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        default_permissions = ()
        ordering = ["name", "-version"]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class Campaign(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active"
        CLOSED = "closed"

    class Assignment(models.TextChoices):
        ALL = "all", "All project annotators"
        NAMED = "named", "Named annotators"

    class Order(models.TextChoices):
        DEFAULT = "default", "In order"
        UNCERTAIN_FIRST = "uncertain_first", "Least confident suggestions first"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="campaigns")
    name = models.CharField(max_length=120)
    # RESTRICT (here and below): not deletable under a campaign, except with the whole project.
    dataset_version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.RESTRICT, related_name="campaigns")
    schema = models.ForeignKey(LabelSchema, on_delete=models.RESTRICT, related_name="campaigns")
    selection = models.JSONField(default=dict)  # {"split", "label", "sample", "seed"}: which rows became items
    guidelines = models.TextField(blank=True, max_length=50_000)  # Markdown, rendered sanitised
    overlap = models.PositiveSmallIntegerField(default=1)  # distinct annotators per item
    assignment = models.CharField(max_length=8, choices=Assignment.choices, default=Assignment.ALL)
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="assigned_campaigns")
    due_at = models.DateTimeField(null=True, blank=True)
    lease_seconds = models.PositiveIntegerField(default=600)
    suggestion_model = models.ForeignKey("registry.RegisteredModel", null=True, blank=True, on_delete=models.SET_NULL,
                                         related_name="+")
    # Which item "next" hands out among those with the fewest answers: the earliest, or (active
    # learning) the one whose classifier suggestion is least confident, unsuggested ones after them.
    order = models.CharField(max_length=16, choices=Order.choices, default=Order.DEFAULT)
    state = models.CharField(max_length=8, choices=State.choices, default=State.ACTIVE)
    item_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        default_permissions = ()
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def suggestion_state(self) -> str:
        """"" without suggestions, else the state of its SuggestionRun."""
        run = self._suggestion_run()
        return run.state if run else ""

    @property
    def suggestion_progress(self) -> dict:
        run = self._suggestion_run()
        if run is None:
            return {}
        progress = {"done": run.items_done, "total": run.items_total} if run.items_total else {}
        return {**progress, "error": run.error} if run.error else progress

    def _suggestion_run(self):
        try:
            return self.suggestion_run
        except SuggestionRun.DoesNotExist:
            return None


class Item(models.Model):
    """One example of a campaign. `completed` counts submitted (not skipped) annotations; it is
    updated in the submit transaction so the queue can order by it without counting."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="items")
    row = models.ForeignKey("datasets.DatasetRow", on_delete=models.RESTRICT, related_name="+")
    position = models.PositiveIntegerField()
    completed = models.PositiveSmallIntegerField(default=0)
    is_gold = models.BooleanField(default=False)
    gold_values = models.JSONField(null=True, blank=True)
    suggestion = models.JSONField(null=True, blank=True)  # {"model": id, "values": {...}} pre-fill
    # A classifier suggestion's top class probability (also in `suggestion`), a column so that the
    # queue can order by it: least confident first.
    confidence = models.FloatField(null=True, blank=True)
    adjudicated_values = models.JSONField(null=True, blank=True)
    adjudicated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="+")
    adjudicated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        default_permissions = ()
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["campaign", "position"], name="unique_item_position")]
        indexes = [models.Index(fields=["campaign", "completed", "position"]),
                   models.Index(fields=["campaign", "completed", "confidence", "position"])]

    @property
    def project(self):
        return self.campaign.project


class Lease(models.Model):
    """An item handed to an annotator by "next item", theirs until `expires_at`."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="leases")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    expires_at = models.DateTimeField()

    class Meta:
        default_permissions = ()
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="unique_lease")]
        indexes = [models.Index(fields=["item", "expires_at"])]


class Annotation(models.Model):
    class Review(models.TextChoices):
        PENDING = "pending"
        ACCEPTED = "accepted"
        REJECTED = "rejected"
        CORRECTED = "corrected"

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="annotations")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="annotations")
    schema = models.ForeignKey(LabelSchema, on_delete=models.RESTRICT, related_name="+")  # the version answered
    client_id = models.UUIDField()  # made by the client: a retried submit finds its first answer
    skipped = models.BooleanField(default=False)
    values = models.JSONField(default=dict)
    comment = models.TextField(blank=True)
    suggestion = models.JSONField(null=True, blank=True)  # what the model proposed, kept beside the answer
    time_spent_ms = models.PositiveIntegerField(null=True, blank=True)
    revision = models.PositiveIntegerField(default=1)  # optimistic concurrency for edits
    review = models.CharField(max_length=16, choices=Review.choices, default=Review.PENDING)
    review_comment = models.TextField(blank=True)
    reviewed_values = models.JSONField(null=True, blank=True)
    reviewed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        default_permissions = ()
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["item", "annotator"], name="one_annotation_per_item_and_annotator"),
            models.UniqueConstraint(fields=["annotator", "client_id"], name="unique_annotation_client_id"),
        ]
        indexes = [models.Index(fields=["annotator", "created_at"])]

    @property
    def project(self):
        return self.item.campaign.project


class Draft(models.Model):
    """Autosaved, unsubmitted answers: kept until the item is submitted, whatever happens to the lease."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="drafts")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    values = models.JSONField(default=dict)
    comment = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        default_permissions = ()
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="unique_draft")]


class AnnotationExport(LeasedJob):
    """Resolving a campaign's answers into a dataset version: a worker job under the jobs lease."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    ENDED = (State.SUCCEEDED, State.FAILED)
    TASK, QUEUE = "annotation.export", "default"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="exports")
    kind = models.CharField(max_length=16, default="resolved")  # resolved | preferences
    mode = models.CharField(max_length=16, default="majority")  # majority | adjudicated | accepted
    min_agreement = models.FloatField(null=True, blank=True)
    dataset = models.ForeignKey("datasets.Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    new_dataset_name = models.CharField(max_length=120, blank=True)
    message = models.CharField(max_length=500, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    rows = models.PositiveIntegerField(default=0)
    version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta(LeasedJob.Meta):
        default_permissions = ()

    @property
    def project(self):
        return self.campaign.project


class SuggestionRun(LeasedJob):
    """A campaign's model suggestions, made by an `inference` worker under the jobs lease. One per
    campaign, keyed by it: the task's message carries the campaign's id."""

    State = JobState
    ENDED = ENDED_STATES
    TASK, QUEUE = "annotation.suggest", "inference"
    DONE_FIELD, TOTAL_FIELD = "items_done", "items_total"

    campaign = models.OneToOneField(Campaign, primary_key=True, on_delete=models.CASCADE,
                                    related_name="suggestion_run")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    items_done = models.PositiveIntegerField(default=0)
    items_total = models.PositiveIntegerField(default=0)

    class Meta(LeasedJob.Meta):
        default_permissions = ()
        ordering = []  # one row per campaign/version, keyed by it: nothing to order

    @classmethod
    def cancel_asked(cls, pk: int) -> bool:
        """Stopped by a manager (services.suggestions_stop ends the run itself) or by closing the campaign."""
        return (not cls.objects.filter(pk=pk, state=cls.State.RUNNING).exists()
                or Campaign.objects.filter(pk=pk, state=Campaign.State.CLOSED).exists())
