"""Live updates of one job, published to `job.<id>`: its state, each metric point, log lines."""

from apps.projects.events import send


def job_group(job_id: int) -> str:
    return f"job.{job_id}"


def state_payload(job) -> dict:
    return {"id": job.pk, "state": job.state, "current_step": job.current_step, "total_steps": job.total_steps,
            "checkpoint_step": job.checkpoint_step, "tokens_trained": job.tokens_trained, "error": job.error,
            "cancel_requested": job.cancel_requested, "adapter": job.adapter_id}


def job_state(job) -> None:
    send(job_group(job.pk), {"type": "job.state", "job": state_payload(job)})


def metric_point(job_id: int, kind: str, point: dict) -> None:
    send(job_group(job_id), {"type": "job.metric", "kind": kind, "point": point})


def log_line(job_id: int, line: str) -> None:
    send(job_group(job_id), {"type": "job.log", "line": line})
