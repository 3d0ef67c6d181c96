"""Live progress of dataset jobs: imports to `import.<id>`, derive jobs (splits, PII scans,
redactions) to `derive.<id>`."""

from apps.projects.events import send


def import_group(job_id: int) -> str:
    return f"import.{job_id}"


def import_progress(job, *, rows_per_s: float | None = None, eta_s: float | None = None) -> None:
    send(import_group(job.pk), {"type": "import.progress", "progress": progress_payload(job, rows_per_s, eta_s)})


def progress_payload(job, rows_per_s: float | None = None, eta_s: float | None = None) -> dict:
    return {
        "id": job.pk, "state": job.state, "rows_done": job.rows_done, "rows_total_estimate": job.rows_total_estimate,
        "rows_per_s": round(rows_per_s, 1) if rows_per_s else None, "eta_s": round(eta_s, 1) if eta_s else None,
        "error": job.error, "version": job.version.number if job.version_id and job.state == "succeeded" else None,
    }


def derive_group(job_id: int) -> str:
    return f"derive.{job_id}"


def derive_progress(job) -> None:
    send(derive_group(job.pk), {"type": "derive.progress", "progress": derive_payload(job)})


def derive_payload(job) -> dict:
    return {"id": job.pk, "kind": job.kind, "state": job.state, "rows_done": job.rows_done,
            "rows_total": job.parent.row_count, "error": job.error.split("\n", 1)[0][:500],
            "version": job.version.number if job.version_id and job.state == "succeeded" else None}
