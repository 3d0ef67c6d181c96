"""Reads about jobs: queue position, metric series, pre-launch estimates."""

from django.db.models import QuerySet

from apps.training.models import MetricPoint, TrainingJob


def queue_position(job: TrainingJob) -> int | None:
    """1 for the next job a free GPU worker takes. The `gpu` queue is one FIFO shared by every
    project, so this counts every queued job sent before this one."""
    if job.state != TrainingJob.State.QUEUED:
        return None
    return TrainingJob.objects.filter(state=TrainingJob.State.QUEUED, created_at__lt=job.created_at).count() + 1


def job_points(job: TrainingJob, *, kind: str = "", after_step: int | None = None) -> QuerySet[MetricPoint]:
    points = job.points.order_by("step", "kind")
    if kind:
        points = points.filter(kind=kind)
    if after_step is not None:
        points = points.filter(step__gt=after_step)
    return points


def seconds_per_example(base_model_id: int) -> tuple[float, int] | None:
    """Measured speed of the last successful job on this base model: (seconds per training
    example, job id), the honest basis of a time estimate; None when nothing was measured."""
    job = (TrainingJob.objects.filter(base_model_id=base_model_id, state=TrainingJob.State.SUCCEEDED,
                                      started_at__isnull=False, finished_at__isnull=False)
           .order_by("-finished_at").first())
    examples = (job.info or {}).get("examples") if job else None
    if not job or not examples:
        return None
    epochs = job.config.get("epochs", 1)
    seconds = (job.finished_at - job.started_at).total_seconds()
    return seconds / (examples * epochs), job.pk
