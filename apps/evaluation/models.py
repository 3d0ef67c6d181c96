"""Judges: a model (a local one of the project, or an outside provider's) with a rubric, and
their runs over a comparison's outputs or over a dataset version's responses (a prompt column and
one response column, pointwise, or two, pairwise).

A run is a job (apps.core.jobs.JobRun) on the `inference` queue, where a local judge's weights
are cached; a provider judge's calls go through apps.providers.services.provider_chat. Its
verdicts are stored item by item (a pair's two orders together), so a resumed run skips what
is stored and never keeps half an item; the summary is written once, when the run succeeds.
"""

from django.conf import settings
from django.db import models

from apps.core.jobs import ACTIVE_STATES, ENDED_STATES, JobState, LeasedJob


class Judge(models.Model):
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="judges")
    name = models.CharField(max_length=120)
    # workers.judging.Rubric.as_dict(): {kind: pointwise|pairwise, instructions, criteria: [{name, description, scale}]}
    rubric = models.JSONField()
    # Exactly one of the two: a model of the project (generated in the inference worker) or a provider's model.
    local_model = models.ForeignKey("registry.RegisteredModel", null=True, blank=True, on_delete=models.RESTRICT,
                                    related_name="+")
    provider_model = models.ForeignKey("providers.ProviderModel", null=True, blank=True, on_delete=models.RESTRICT,
                                       related_name="+")
    max_tokens = models.PositiveIntegerField(default=256)  # the most a judge's answer may take
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        default_permissions = ()
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="judge_unique_name"),
            models.CheckConstraint(condition=models.Q(local_model__isnull=True) ^ models.Q(provider_model__isnull=True),
                                   name="judge_one_model"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def kind(self) -> str:
        return self.rubric.get("kind", "")

    @property
    def model_label(self) -> str:
        return str(self.provider_model) if self.provider_model_id else self.local_model.name


class JudgeRun(LeasedJob):
    State = JobState
    ACTIVE, ENDED = ACTIVE_STATES, ENDED_STATES
    TASK, QUEUE = "evaluation.judge_run", "inference"
    DONE_FIELD, TOTAL_FIELD = "calls_done", "calls_total"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="judge_runs")
    judge = models.ForeignKey(Judge, on_delete=models.CASCADE, related_name="runs")
    # What it judges, exactly one of the two: a comparison's outputs, or a dataset version's rows
    # (the columns it reads are in config: prompt_column, response_column[, second_response_column]).
    comparison = models.ForeignKey("comparison.Comparison", null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="judge_runs")
    dataset_version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.CASCADE,
                                        related_name="+")
    # The judge as it was at launch (rubric, model, max_tokens; for a version, the columns): a run reads only this.
    config = models.JSONField(default=dict)
    estimate = models.JSONField(default=dict)  # workers.judging.estimate_cost, shown before launch
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    calls_done = models.PositiveIntegerField(default=0)
    calls_total = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)  # written when it succeeds
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta(LeasedJob.Meta):
        default_permissions = ()
        indexes = [models.Index(fields=["project", "state"])]
        constraints = [
            models.CheckConstraint(condition=models.Q(comparison__isnull=True) ^ models.Q(dataset_version__isnull=True),
                                   name="judge_run_one_source"),
        ]

    @property
    def source_label(self) -> str:
        """What the run judged, for lists: the comparison's name, or the dataset version and its columns."""
        if self.comparison_id:
            return self.comparison.name
        version = self.dataset_version
        columns = [self.config.get(k) for k in ("response_column", "second_response_column") if self.config.get(k)]
        return f"{version.dataset.name} v{version.number} ({self.config.get('prompt_column')} → {' vs '.join(columns)})"


class Verdict(models.Model):
    """One answer of the judge: on one output (pointwise) or one pair of outputs of a prompt in
    one order (pairwise: `swapped` when `second` was shown as A). A run over a dataset version
    points at the row instead (`position`; the comparison's three are null)."""

    run = models.ForeignKey(JudgeRun, on_delete=models.CASCADE, related_name="verdicts")
    # the engine's item key: "p<prompt>:c<contestant>[:c<contestant>]", or "r<position>" for a dataset row
    item = models.CharField(max_length=64)
    swapped = models.BooleanField(default=False)
    prompt = models.ForeignKey("comparison.Prompt", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    first = models.ForeignKey("comparison.Contestant", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="+")  # pointwise: the judged
    second = models.ForeignKey("comparison.Contestant", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="+")
    position = models.PositiveIntegerField(null=True, blank=True)  # the dataset row's, for a run over a version
    raw = models.TextField(blank=True)
    answer = models.JSONField(null=True, blank=True)  # valid against the rubric's schema, or null
    parse_error = models.CharField(max_length=300, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "item", "swapped"], name="verdict_unique_item_order"),
            models.CheckConstraint(
                condition=(models.Q(position__isnull=True, prompt__isnull=False, first__isnull=False)
                           | models.Q(position__isnull=False, prompt__isnull=True, first__isnull=True,
                                      second__isnull=True)),
                name="verdict_one_target"),
        ]


class PersonJudgement(models.Model):
    """What a person's rating and blind choice share: the judge whose rubric they answer, who
    answered, and when. One per person and target: answering again replaces it."""

    judge = models.ForeignKey(Judge, on_delete=models.CASCADE, related_name="%(class)ss")
    rater = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["judge", "id"]
        default_permissions = ()


class Rating(PersonJudgement):
    """A person's rating of one response on a pointwise judge's rubric: `answer` has the shape of
    the judge's answer ({criterion: {score, reason}}, valid against the rubric's schema), so the
    two can be set side by side. What is rated is exactly one of: an output of a comparison, or a
    dataset version's row (`position`) read in two of its columns, as a run of the judge over the
    version reads them (prompt_column, response_column). One per person, response and judge:
    rating again replaces it. Raters see the response blind, as voters do."""

    output = models.ForeignKey("comparison.Output", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    dataset_version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.CASCADE,
                                        related_name="+")
    position = models.PositiveIntegerField(null=True, blank=True)  # the version's row
    prompt_column = models.CharField(max_length=200, blank=True)  # a version's columns; "" for an output
    response_column = models.CharField(max_length=200, blank=True)
    answer = models.JSONField()

    class Meta(PersonJudgement.Meta):
        constraints = [
            models.UniqueConstraint(fields=["judge", "output", "rater"], name="rating_unique_rater"),
            models.UniqueConstraint(fields=["judge", "dataset_version", "position", "prompt_column",
                                            "response_column", "rater"], name="rating_row_unique_rater"),
            models.CheckConstraint(
                condition=(models.Q(output__isnull=False, dataset_version__isnull=True, position__isnull=True,
                                    prompt_column="", response_column="")
                           | models.Q(output__isnull=True, dataset_version__isnull=False, position__isnull=False)
                           & ~models.Q(prompt_column="") & ~models.Q(response_column="")),
                name="rating_one_target"),
        ]


class Preference(PersonJudgement):
    """A person's blind choice between a dataset version's row's two responses for a pairwise
    judge: the row (`position`) read in three of its columns, as a run of the judge over the
    version reads them (prompt_column, response_column = first, second_response_column = second).
    `swapped` when the second was shown as A. One per person, row, columns and judge: choosing
    again replaces it."""

    class Choice(models.TextChoices):
        FIRST = "first"
        SECOND = "second"
        TIE = "tie"

    dataset_version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField()  # the version's row
    prompt_column = models.CharField(max_length=200)
    response_column = models.CharField(max_length=200)
    second_response_column = models.CharField(max_length=200)
    choice = models.CharField(max_length=8, choices=Choice.choices)
    swapped = models.BooleanField()

    class Meta(PersonJudgement.Meta):
        constraints = [
            models.UniqueConstraint(fields=["judge", "dataset_version", "position", "prompt_column", "response_column",
                                            "second_response_column", "rater"], name="preference_unique_rater"),
            models.CheckConstraint(condition=models.Q(choice__in=["first", "second", "tie"]),
                                   name="preference_choice"),
            models.CheckConstraint(
                condition=~models.Q(prompt_column="") & ~models.Q(response_column="")
                & ~models.Q(second_response_column="") & ~models.Q(response_column=models.F("second_response_column")),
                name="preference_two_columns"),
        ]


class CalibrationPolicy(models.Model):
    """How well a judge must agree with the project's people before it counts as calibrated. Each
    figure with at least `min_items` judge-vs-person items must reach its threshold, and at least
    one figure must have that many: Cohen's kappa with the blind votes and, for a pointwise judge
    that people rated, per criterion Spearman's rho with the ratings (1-5, `min_correlation`) or
    kappa (pass/fail, `min_kappa`). A judge short of it is shown 'not calibrated' and may gate
    nothing. Without a row: the defaults (kappa 0.6, the lower edge of 'substantial' agreement on
    Landis and Koch's scale; rho 0.6, a strong correlation; 20 items)."""

    DEFAULT_MIN_KAPPA, DEFAULT_MIN_CORRELATION, DEFAULT_MIN_ITEMS = 0.6, 0.6, 20

    project = models.OneToOneField("projects.Project", on_delete=models.CASCADE, related_name="calibration_policy")
    min_kappa = models.FloatField(default=DEFAULT_MIN_KAPPA)
    min_correlation = models.FloatField(default=DEFAULT_MIN_CORRELATION)
    min_items = models.PositiveIntegerField(default=DEFAULT_MIN_ITEMS)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        default_permissions = ()


class EvalSuite(models.Model):
    """A named, fixed evaluation: every prompt of a dataset version (or of one of its splits),
    generated greedily, scored on `metrics` (workers.evaluation: [{metric, threshold}]) against the
    rows' references, beside a baseline model's scores. With `gate_alias`, moving that alias of any
    model of the project onto a version needs the version's latest run of the suite to pass every
    threshold. With `auto_run`, each fine-tune of the project that registers an adapter runs it.
    A suite is not edited (its runs stay comparable): make another."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="eval_suites")
    name = models.CharField(max_length=120)
    dataset_version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.RESTRICT, related_name="+")
    split = models.CharField(max_length=64, blank=True)  # "" for every row of the version
    metrics = models.JSONField()
    baseline_model = models.ForeignKey("registry.RegisteredModel", null=True, blank=True, on_delete=models.RESTRICT,
                                       related_name="+")
    max_new_tokens = models.PositiveIntegerField(default=64)
    gate_alias = models.CharField(max_length=48, blank=True)
    auto_run = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        default_permissions = ()
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="eval_suite_unique_name")]

    def __str__(self) -> str:
        return self.name


class EvalRun(LeasedJob):
    """One model's run of a suite on the `inference` queue: its outputs (EvalItem), the
    aggregates, the baseline's aggregates (generated in the same run, or taken from an earlier
    run of the suite that has them) with the delta, and the gate's verdict."""

    State = JobState
    ACTIVE, ENDED = ACTIVE_STATES, ENDED_STATES
    TASK, QUEUE = "evaluation.eval_run", "inference"
    DONE_FIELD, TOTAL_FIELD = "items_done", "items_total"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="eval_runs")
    suite = models.ForeignKey(EvalSuite, on_delete=models.CASCADE, related_name="runs")
    model = models.ForeignKey("registry.RegisteredModel", on_delete=models.RESTRICT, related_name="+")
    training_job = models.ForeignKey("training.TrainingJob", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")  # the fine-tune that launched it (auto-run)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    items_done = models.PositiveIntegerField(default=0)
    items_total = models.PositiveIntegerField(default=0)
    aggregates = models.JSONField(default=dict, blank=True)
    baseline_aggregates = models.JSONField(default=dict, blank=True)
    delta = models.JSONField(default=dict, blank=True)
    passed = models.BooleanField(null=True)  # the gate's verdict, once it succeeded
    failures = models.JSONField(default=list, blank=True)  # GateFailure.as_dict() of each missed threshold
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta(LeasedJob.Meta):
        default_permissions = ()
        indexes = [models.Index(fields=["suite", "model", "state"])]

    @property
    def metric_rows(self) -> list[dict]:
        """Each metric of the suite with this run's value, the baseline's, the delta and its
        threshold (`failed` when the gate missed it), for the pages."""
        missed = {f["metric"] for f in self.failures or []}
        return [{"key": m["key"], "value": self.aggregates.get(m["key"]),
                 "baseline": (self.baseline_aggregates or {}).get(m["key"]),
                 "delta": (self.delta or {}).get(m["key"]), "threshold": m.get("threshold"),
                 "failed": m["key"] in missed} for m in self.suite.metrics]


class EvalItem(models.Model):
    """One output of a run: the run's model's (or, `baseline`, the baseline model's) answer to
    one row of the suite, with its scores."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()  # the dataset row's position
    baseline = models.BooleanField(default=False)
    prompt = models.TextField()
    reference = models.TextField(blank=True)
    output = models.TextField(blank=True)
    error = models.TextField(blank=True)
    scores = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "baseline", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "position", "baseline"], name="eval_item_unique")]


class TeacherRun(LeasedJob):
    """Distillation: a teacher model (a local one of the project, or a provider's) answers every
    prompt of a dataset version, and the answers become the dataset's next version through the
    import pipeline (prompt or messages, response; the teacher, tokens and cost as metadata).

    Answers are stored as they come (TeacherAnswer), so a run taken over after its worker died
    asks only for the rows not yet answered. Only when every row is answered is the version
    imported; the run ends with that import, so a cancelled or failed run leaves no version."""

    State = JobState
    ACTIVE, ENDED = ACTIVE_STATES, ENDED_STATES
    TASK, QUEUE = "evaluation.teacher_run", "inference"
    DONE_FIELD, TOTAL_FIELD = "rows_done", "rows_total"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="teacher_runs")
    source_version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.CASCADE, related_name="+")
    # The teacher and its generation as they were at launch, the only thing a run reads:
    # {local_model | provider_model, teacher (its name), prompt_column, max_tokens, temperature, seed}.
    config = models.JSONField(default=dict)
    estimate = models.JSONField(default=dict)  # workers.teaching.estimate_cost (+ max_cost), shown before launch
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    rows_done = models.PositiveIntegerField(default=0)
    rows_total = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)  # null: not a priced provider
    import_job = models.ForeignKey("datasets.ImportJob", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")  # the version it made, once it succeeded
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta(LeasedJob.Meta):
        default_permissions = ()
        indexes = [models.Index(fields=["project", "state"])]


class TeacherAnswer(models.Model):
    """The teacher's answer to one row of the run's version (by position)."""

    run = models.ForeignKey(TeacherRun, on_delete=models.CASCADE, related_name="answers")
    position = models.PositiveIntegerField()
    response = models.TextField()
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="teacher_answer_unique_row")]
