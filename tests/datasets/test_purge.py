"""Purging a version deletes its rows for good, through a real worker, unless a fine-tune, a
comparison or an annotation campaign uses it; the version stays in the history as purged."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.datasets import services
from apps.datasets.derive import run_derive
from apps.datasets.models import Dataset, DatasetRow, DatasetVersion, DeriveJob
from apps.datasets.writer import write_version
from apps.projects.models import AuditEvent
from tests.conftest import wait_for

ROLES = {"prompt": "prompt", "response": "response"}


def make_version(project, owner, name="QA", rows=5):
    dataset = Dataset.objects.create(project=project, name=name, created_by=owner)
    return write_version(dataset=dataset, author=owner, roles=ROLES,
                         records=[{"prompt": f"question {i}", "response": f"answer {i}"} for i in range(rows)])


def url(version):
    return f"/api/datasets/{version.dataset_id}/versions/{version.number}/"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_owner_purges_an_unused_version_and_a_worker_deletes_its_rows(client, owner, project, celery_worker):
    version = make_version(project, owner, rows=25)
    kept = write_version(dataset=version.dataset, author=owner, roles=ROLES, parent=version,
                         records=[{"prompt": "question 0", "response": "answer 0"}])
    client.force_login(owner)
    response = client.delete(url(version))
    assert response.status_code == 202, response.content
    assert response.json()["kind"] == "purge"
    # Gone from browsing at once, before the worker runs.
    assert client.get(url(version) + "rows/").status_code == 404
    job = wait_for(lambda: (j := DeriveJob.objects.get(pk=response.json()["id"])).state in ("succeeded", "failed")
                   and j, timeout=60, what="the purge")
    assert job.state == "succeeded", job.error
    assert job.result == {"rows_deleted": 25}
    assert not DatasetRow.objects.filter(version=version).exists()
    assert DatasetRow.objects.filter(version=kept).count() == 1  # the next version is untouched
    detail = client.get(url(version)).json()  # still in the history, as purged, with its hash
    assert (detail["status"], detail["content_hash"]) == ("purged", version.content_hash)
    assert detail["purged_at"]
    listed = client.get(f"/api/datasets/{version.dataset_id}/versions/").json()["results"]
    assert [(v["number"], v["status"]) for v in listed] == [(2, "ready"), (1, "purged")]
    event = AuditEvent.objects.get(action="dataset.purge_version")
    assert event.before == {"version": 1, "rows": 25, "content_hash": version.content_hash}
    assert client.delete(url(version)).status_code == 404  # nothing left to purge


@pytest.mark.django_db
def test_a_version_used_by_a_fine_tune_cannot_be_purged(client, owner, project):
    from tests.training.fixtures import make_job

    job = make_job(project, owner, state="succeeded")
    version = job.dataset_version
    client.force_login(owner)
    response = client.delete(url(version))
    assert response.status_code == 409
    assert f"fine-tune #{job.pk}" in response.json()["detail"]
    version.refresh_from_db()
    assert version.status == "ready" and version.rows.count() > 0
    assert not DeriveJob.objects.filter(kind="purge").exists()
    assert not AuditEvent.objects.filter(action="dataset.purge_version").exists()


@pytest.mark.django_db
def test_versions_used_by_a_comparison_or_a_campaign_cannot_be_purged(client, owner, project):
    from apps.annotation.models import Campaign, LabelSchema
    from tests.comparison.factories import make_comparison

    compared = make_version(project, owner, name="Prompts")
    comparison = make_comparison(project, owner, name="Base vs tuned")
    comparison.dataset_version = compared
    comparison.save(update_fields=["dataset_version"])
    labelled = make_version(project, owner, name="To label")
    schema = LabelSchema.objects.create(project=project, name="Sentiment", created_by=owner, fields=[
        {"key": "sentiment", "type": "single_label", "options": ["good", "bad"]}])
    Campaign.objects.create(project=project, name="Labels", dataset_version=labelled, schema=schema, created_by=owner)
    client.force_login(owner)
    refused = client.delete(url(compared))
    assert refused.status_code == 409 and "comparison “Base vs tuned”" in refused.json()["detail"]
    refused = client.delete(url(labelled))
    assert refused.status_code == 409 and "annotation campaign “Labels”" in refused.json()["detail"]
    assert DatasetVersion.objects.filter(status="purged").count() == 0


@pytest.mark.django_db
def test_a_version_pinned_after_it_was_marked_is_kept_by_the_worker(owner, project):
    """A launch racing the purge: the worker checks the pins again before deleting anything."""
    from apps.registry.models import RegisteredModel
    from apps.training.models import TrainingJob

    version = make_version(project, owner)
    purge = services.version_purge_start(user=owner, version=version)
    model = RegisteredModel.objects.create(project=project, name="Base", format="hf_dir", source_path="/x",
                                           weights_path="/x", status="ready", info={})
    launched = TrainingJob.objects.create(project=project, name="Run", base_model=model, dataset_version=version,
                                          config={}, created_by=owner)
    run_derive(purge.pk)
    purge.refresh_from_db()
    version.refresh_from_db()
    assert purge.state == "failed"
    assert purge.error.startswith(f"RuntimeError: Not purged: fine-tune #{launched.pk} started using version 1.")
    assert version.status == "ready" and version.purged_at is None and version.rows.count() == 5


@pytest.mark.django_db
def test_a_version_with_a_job_running_on_it_is_not_purged(client, owner, project):
    version = make_version(project, owner)
    DeriveJob.objects.create(parent=version, kind="pii_scan", state="running", created_by=owner)
    client.force_login(owner)
    response = client.delete(url(version))
    assert response.status_code == 409 and "job running on it" in response.json()["detail"]


@pytest.mark.django_db
def test_retention_purges_unpinned_versions_of_long_deleted_datasets_only(owner, project):
    from tests.training.fixtures import make_job

    old = make_version(project, owner, name="Old")
    recent = make_version(project, owner, name="Recent")
    pinned = make_job(project, owner, state="succeeded").dataset_version
    for dataset in (old.dataset, recent.dataset, pinned.dataset):
        services.dataset_delete(user=owner, dataset=dataset)
    Dataset.all_objects.filter(pk__in=[old.dataset_id, pinned.dataset_id]).update(
        deleted_at=timezone.now() - timedelta(days=40))
    call_command("purge_deleted_datasets", "--days", "30")
    statuses = dict(DatasetVersion.objects.values_list("pk", "status"))
    assert (statuses[old.pk], statuses[recent.pk], statuses[pinned.pk]) == ("purged", "ready", "ready")
    purge = DeriveJob.objects.get(kind="purge")
    assert purge.parent_id == old.pk
    run_derive(purge.pk)  # as the worker would
    assert not DatasetRow.objects.filter(version=old).exists() and recent.rows.count() == 5


@pytest.mark.django_db
def test_a_scientist_cannot_purge_and_another_projects_version_is_not_found(client, scientist, owner, project,
                                                                           other_project):
    version = make_version(project, owner)
    other = make_version(other_project, owner, name="Theirs")
    client.force_login(scientist)
    assert client.delete(url(version)).status_code == 403  # scientists may edit, not delete
    client.force_login(owner)
    assert client.delete(url(other)).status_code == 404
    assert client.get(url(other)).status_code == 404
    assert DatasetVersion.objects.filter(status="purged").count() == 0
