"""Reads about jobs: queue position, metric series, pre-launch estimates."""

from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.training.models import MetricPoint, TrainingJob


def queue_position(job: TrainingJob) -> int | None:
    """1 for the next job a free GPU worker takes. The `gpu` queue is shared by every project and
    served by priority, then in order: this counts the queued jobs of a higher priority and those
    of the same priority sent before this one."""
    if job.state != TrainingJob.State.QUEUED:
        return None
    return TrainingJob.objects.filter(
        Q(priority__gt=job.priority) | Q(priority=job.priority, created_at__lt=job.created_at),
        state=TrainingJob.State.QUEUED).count() + 1


def gpu_hours_used(project) -> float:
    """Worker hours the project's fine-tunes have held: start to end (or now), every job."""
    now = timezone.now()
    seconds = sum(((finished or now) - started).total_seconds() for started, finished in
                  TrainingJob.objects.filter(project=project, started_at__isnull=False)
                  .values_list("started_at", "finished_at"))
    return seconds / 3600


def job_points(job: TrainingJob, *, kind: str = "", after_step: int | None = None) -> QuerySet[MetricPoint]:
    points = job.points.order_by("step", "kind")
    if kind:
        points = points.filter(kind=kind)
    if after_step is not None:
        points = points.filter(step__gt=after_step)
    return points


COMPARE_METRICS = {  # metric -> (point kind, label)
    "loss": ("train", "train loss"), "eval_loss": ("eval", "eval loss"), "perplexity": ("eval", "perplexity"),
    "lr": ("train", "learning rate"), "grad_norm": ("train", "grad norm"), "tokens_per_s": ("train", "tokens/s"),
    "memory_mb": ("train", "memory (MB)"), "eval_accuracy": ("eval", "eval accuracy (classifiers)"),
    "eval_macro_f1": ("eval", "eval macro-F1 (classifiers)"),
}
COMPARE_AXES = {"step": "step", "tokens": "tokens seen", "time": "training time (s)"}
MAX_COMPARED_JOBS = 10


def compare_series(jobs: list[TrainingJob], *, metric: str, x_axis: str) -> list[dict]:
    """One series per job for an overlay chart: x by step, tokens seen or training time. Eval
    points take x from the train point of the same step (they carry only the step)."""
    kind, _ = COMPARE_METRICS[metric]
    series = []
    for job in jobs:
        train = {p.step: p.values for p in job.points.filter(kind="train").order_by("step")}
        points = train if kind == "train" else {p.step: p.values for p in job.points.filter(kind=kind)}
        xs, ys = [], []
        for step in sorted(points):
            value = points[step].get(metric)
            if value is None:
                continue
            at = train.get(step, {})
            x = step if x_axis == "step" else at.get("tokens_seen" if x_axis == "tokens" else "elapsed_s")
            if x is not None:
                xs.append(x)
                ys.append(value)
        series.append({"job": job.pk, "name": f"{job.name} (#{job.pk})", "x": xs, "y": ys})
    return series


def config_table(jobs: list[TrainingJob]) -> list[dict]:
    """Inputs and config of each job side by side; `differs` marks the rows where they disagree."""
    def settings_of(job: TrainingJob) -> dict:
        return {"base model": job.base_model.name, "dataset version": str(job.dataset_version),
                "train split": job.train_split or "all rows", "eval split": job.eval_split or "none",
                **{key: job.config.get(key) for key in sorted(job.config)}}

    columns = [settings_of(job) for job in jobs]
    keys = list(dict.fromkeys(key for column in columns for key in column))
    return [{"key": key, "values": [column.get(key) for column in columns],
             "differs": len({repr(column.get(key)) for column in columns}) > 1} for key in keys]


def sweep_state(sweep) -> str:
    """cancelled (by a person), running (a job queued or running), or done."""
    if sweep.cancelled_at is not None:
        return "cancelled"
    return "running" if sweep.jobs.filter(state__in=TrainingJob.ACTIVE).exists() else "done"


# What a sweep's jobs are ranked by: metric -> (label, higher is better).
SWEEP_OBJECTIVES = {"eval_loss": ("eval loss", False), "eval_macro_f1": ("eval macro-F1", True)}


def sweep_objective(sweep) -> str:
    """A classifier sweep ranks by eval macro-F1 (what its early stopping watches: the loss rewards
    the common classes), any other by eval loss."""
    return "eval_macro_f1" if (sweep.base_config or {}).get("method") == "classify" else "eval_loss"


def _eval_values(job: TrainingJob, metrics: tuple[str, ...]) -> list[float | None]:
    """Each of `metrics` from the job's final metrics once it succeeded, else from its latest
    evaluation after step 0 (the base): one look-up of that evaluation for all of them."""
    final = job.metrics if job.state == TrainingJob.State.SUCCEEDED else {}
    if all(final.get(metric) is not None for metric in metrics):
        return [final[metric] for metric in metrics]
    point = job.points.filter(kind=MetricPoint.Kind.EVAL, step__gt=0).order_by("-step").first()
    return [final[m] if final.get(m) is not None else (point.values.get(m) if point else None) for m in metrics]


def sweep_trials(sweep) -> list[dict]:
    """The sweep's jobs ranked by its objective (sweep_objective), best first (jobs with none yet last,
    in launch order): each with its `score` on the objective, its eval loss, its point (the swept
    options' values), state, step and adapter; `rank` from 1, None for a job without a score."""
    metric = sweep_objective(sweep)
    _, higher_is_better = SWEEP_OBJECTIVES[metric]
    trials = []
    for job in sweep.jobs.order_by("pk"):
        loss, score = _eval_values(job, ("eval_loss", metric))
        trials.append({"job": job.pk, "name": job.name, "state": job.state, "score": score, "eval_loss": loss,
                       "point": {option: job.config.get(option) for option in sweep.space},
                       "current_step": job.current_step, "total_steps": job.total_steps, "adapter": job.adapter_id})
    trials.sort(key=lambda t: (t["score"] is None,
                               0 if t["score"] is None else (-t["score"] if higher_is_better else t["score"]), t["job"]))
    for rank, trial in enumerate(trials, start=1):
        trial["rank"] = rank if trial["score"] is not None else None
    return trials
