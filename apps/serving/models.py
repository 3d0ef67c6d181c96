from django.conf import settings
from django.db import models

from apps.core.jobs import ENDED_STATES, JobState, LeasedJob


class Generation(LeasedJob):
    """One generation request (a playground turn or an OpenAI-compatible API call), run by a
    worker on the `inference` queue; the row keeps the request, the output and its timings."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    ENDED = (State.SUCCEEDED, State.FAILED)  # a stopped one succeeds with finish_reason "cancelled"
    TASK, QUEUE = "serving.generate", "inference"

    class Source(models.TextChoices):
        PLAYGROUND = "playground"
        API = "api"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="generations")
    model = models.ForeignKey("registry.RegisteredModel", on_delete=models.CASCADE, related_name="generations")
    # The alias the caller asked for (name@alias, or a bare name's production), when one chose `model`.
    alias = models.ForeignKey("registry.ModelAlias", null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="generations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    source = models.CharField(max_length=16, choices=Source.choices)
    # A /v1 request with n choices is n generations; the client knows them as one completion id
    # (choice 0's) and an index. Choice 0 itself has no first_choice.
    first_choice = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    choice_index = models.PositiveSmallIntegerField(default=0)
    messages = models.JSONField(null=True, blank=True)  # chat: [{role, content}]
    prompt = models.TextField(null=True, blank=True)  # completion
    params = models.JSONField(default=dict)  # workers.inference.SamplingParams fields
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    cancel_requested = models.BooleanField(default=False)  # the worker stops it after its next token
    output = models.TextField(blank=True)
    finish_reason = models.CharField(max_length=16, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    time_to_first_token_s = models.FloatField(null=True, blank=True)  # measured in the worker
    total_s = models.FloatField(null=True, blank=True)
    # With params.logprobs: per generated token {token, logprob, bytes, top_logprobs} (GenerationResult.logprobs)
    logprobs = models.JSONField(null=True, blank=True)
    # The precision the worker loaded the model in (fp32, bf16, int8: the model's serving precision resolved).
    precision = models.CharField(max_length=8, blank=True)
    error_field = models.CharField(max_length=64, blank=True)

    class Meta(LeasedJob.Meta):
        indexes = [models.Index(fields=["project", "created_at"]), models.Index(fields=["alias", "model", "created_at"])]

    def result(self) -> dict:
        return {"id": self.pk, "state": self.state, "text": self.output, "finish_reason": self.finish_reason,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "time_to_first_token_s": self.time_to_first_token_s, "total_s": self.total_s,
                "tokens_per_s": round(self.completion_tokens / self.total_s, 1) if self.total_s else None,
                "logprobs": self.logprobs, "precision": self.precision, "error": self.error,
                "field": self.error_field}


class Classification(LeasedJob):
    """Texts classified by a classifier adapter (training method classify) on an `inference` worker:
    the request, and for each text its label and class probabilities (apps.serving.classify)."""

    State = JobState
    ENDED = ENDED_STATES
    TASK, QUEUE = "serving.classify", "inference"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="classifications")
    model = models.ForeignKey("registry.RegisteredModel", on_delete=models.CASCADE, related_name="classifications")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    texts = models.JSONField()  # [str], at most apps.serving.services.MAX_CLASSIFY_TEXTS
    results = models.JSONField(null=True, blank=True)  # [{label, probabilities: {class: p}}], in the texts' order
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)

    class Meta(LeasedJob.Meta):
        default_permissions = ()


class Capture(models.Model):
    """One /v1 request and its answer through an alias that logs its traffic: what production
    users asked (personal data replaced when the alias redacts: the raw text is never stored then),
    the version that answered, its timings, and the user's feedback once the client sends it.
    Deleted after the alias's retention; turned into dataset versions on demand."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="captures")
    alias = models.ForeignKey("registry.ModelAlias", on_delete=models.CASCADE, related_name="captures")
    version = models.ForeignKey("registry.RegisteredModel", on_delete=models.CASCADE, related_name="captures")
    generation = models.OneToOneField(Generation, null=True, on_delete=models.SET_NULL, related_name="capture")
    completion_id = models.CharField(max_length=40)  # "chatcmpl-<choice 0's generation id>" as the client saw it
    choice_index = models.PositiveSmallIntegerField(default=0)  # which of the request's n choices
    messages = models.JSONField()  # [{role, content}]; a completion's prompt as one user message
    response = models.TextField()
    redacted = models.BooleanField(default=False)
    redactions = models.PositiveIntegerField(default=0)
    latency_s = models.FloatField(null=True)
    time_to_first_token_s = models.FloatField(null=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    feedback_score = models.FloatField(null=True, blank=True)
    feedback_comment = models.TextField(blank=True)
    feedback_at = models.DateTimeField(null=True, blank=True)
    # The alias's quality judge on this answer while a canary runs: its score on 0..1
    # (workers.judging.stats.point_score), or null with `judge_error` when its answer was unreadable.
    judged_by = models.ForeignKey("evaluation.Judge", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    judge_score = models.FloatField(null=True, blank=True)
    judge_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["alias", "created_at"])]
        constraints = [models.UniqueConstraint(fields=["completion_id", "choice_index"], name="unique_capture_choice")]
