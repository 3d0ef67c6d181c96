from django.conf import settings
from django.db import models

from apps.core.jobs import ACTIVE_STATES, ENDED_STATES, JobState, LeasedJob


class Comparison(LeasedJob):
    """Two to four models answering the same prompts with the same sampling parameters.

    A Celery task on the `inference` queue fills the grid of outputs (one per prompt and
    model); people then vote blind on pairs of outputs, and the votes rate the models.
    """

    State = JobState
    ACTIVE, ENDED = ACTIVE_STATES, ENDED_STATES
    TASK, QUEUE = "comparison.run", "inference"
    DONE_FIELD, TOTAL_FIELD = "cells_done", "cells_total"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="comparisons")
    name = models.CharField(max_length=120)
    params = models.JSONField(default=dict)  # workers.inference.SamplingParams fields, shared by every model
    # Where the prompts came from: {"kind": "ad_hoc"} or {"kind": "dataset", "dataset_version": id,
    # "content_hash": ..., "split": ..., "sample_size": n, "seed": s}.
    source = models.JSONField(default=dict)
    dataset_version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="comparisons")

    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    cells_done = models.PositiveIntegerField(default=0)
    cells_total = models.PositiveIntegerField(default=0)

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta(LeasedJob.Meta):
        default_permissions = ()
        indexes = [models.Index(fields=["project", "state"])]

    def __str__(self) -> str:
        return self.name


class Contestant(models.Model):
    """One model of a comparison, at its column."""

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="contestants")
    # RESTRICT, not PROTECT: a model is only ever soft-deleted, except when its whole project is
    # deleted, and then the comparison goes in the same cascade (PROTECT would refuse that).
    model = models.ForeignKey("registry.RegisteredModel", on_delete=models.RESTRICT, related_name="+")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["comparison", "position"]
        constraints = [
            models.UniqueConstraint(fields=["comparison", "position"], name="unique_contestant_position"),
            models.UniqueConstraint(fields=["comparison", "model"], name="unique_contestant_model"),
        ]


class Prompt(models.Model):
    """One prompt of a comparison, with its reference answer when the dataset had one."""

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="prompts")
    position = models.PositiveIntegerField()
    text = models.TextField()
    reference = models.TextField(null=True, blank=True)
    source_position = models.PositiveIntegerField(null=True, blank=True)  # the dataset row it came from

    class Meta:
        ordering = ["comparison", "position"]
        constraints = [models.UniqueConstraint(fields=["comparison", "position"], name="unique_prompt_position")]


class Output(models.Model):
    """One model's answer to one prompt, keyed by (prompt, contestant) so a rerun replaces it."""

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="outputs")
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="outputs")
    contestant = models.ForeignKey(Contestant, on_delete=models.CASCADE, related_name="outputs")
    text = models.TextField(blank=True)
    error = models.TextField(blank=True)
    finish_reason = models.CharField(max_length=16, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    latency_s = models.FloatField(null=True, blank=True)
    tokens_per_s = models.FloatField(null=True, blank=True)
    scores = models.JSONField(default=dict, blank=True)  # exact_match, rouge_l, perplexity (with a reference)
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["prompt__position", "contestant__position"]
        constraints = [models.UniqueConstraint(fields=["prompt", "contestant"], name="unique_output_cell")]


class Pair(models.Model):
    """Two outputs of one prompt served to one voter, in the left/right order the server drew.

    A voter is served each (prompt, two models) once: `first` is always the contestant with the
    lower position, so the pair's identity does not depend on the order shown.
    """

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="pairs")
    voter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="+")
    first = models.ForeignKey(Contestant, on_delete=models.CASCADE, related_name="+")
    second = models.ForeignKey(Contestant, on_delete=models.CASCADE, related_name="+")
    first_on_left = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["voter", "prompt", "first", "second"],
                                               name="unique_pair_per_voter")]

    @property
    def left(self) -> Contestant:
        return self.first if self.first_on_left else self.second

    @property
    def right(self) -> Contestant:
        return self.second if self.first_on_left else self.first


class Vote(models.Model):
    """A voter's verdict on a pair: `choice` is what they pressed (a = left, b = right, tie,
    both_bad); `winner`/`loser` are the contestants it names (empty for tie and both bad)."""

    class Choice(models.TextChoices):
        A = "a", "A (left) is better"
        B = "b", "B (right) is better"
        TIE = "tie", "Tie"
        BOTH_BAD = "both_bad", "Both are bad"

    pair = models.OneToOneField(Pair, on_delete=models.CASCADE, related_name="vote")
    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="votes")
    voter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    choice = models.CharField(max_length=8, choices=Choice.choices)
    winner = models.ForeignKey(Contestant, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    loser = models.ForeignKey(Contestant, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    client_id = models.CharField(max_length=64)  # generated by the client: a retried vote is recognised
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["voter", "client_id"], name="unique_vote_client_id")]
