"""Celery tasks of datasets: thin adapters that take a job id and hand it to the service that runs it."""

from celery import shared_task


@shared_task(name="datasets.import", bind=True)
def import_dataset_task(self, job_id: int) -> None:
    from apps.datasets.importer import run_import

    run_import(job_id, worker=self.request.hostname or "")


@shared_task(name="datasets.index_search", bind=True)
def index_search_task(self, version_id: int) -> None:
    """A SearchIndexJob, whose id is its version's."""
    from apps.datasets.search_index import run_build

    run_build(version_id, worker=self.request.hostname or "")


@shared_task(name="datasets.derive", bind=True)
def derive_version_task(self, job_id: int) -> None:
    from apps.datasets.derive import run_derive

    run_derive(job_id, worker=self.request.hostname or "")


@shared_task(name="datasets.export", bind=True)
def export_version_task(self, job_id: int) -> None:
    from apps.datasets.exports import run_export_job

    run_export_job(job_id, worker=self.request.hostname or "")
