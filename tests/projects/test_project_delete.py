"""Deleting a project takes everything in it, whatever points at what inside it (fine-tune jobs
pin their model and dataset version; campaigns pin their version, rows and schema)."""

import pytest

from apps.annotation.models import Annotation, Campaign, Item
from apps.datasets.models import DatasetRow, DatasetVersion
from apps.projects import services
from apps.projects.models import Project
from apps.registry.models import RegisteredModel
from apps.training.models import TrainingJob
from tests.annotation.fixtures import answer, make_campaign, next_item, submit
from tests.training.fixtures import make_job

pytestmark = pytest.mark.django_db


def test_a_project_with_jobs_campaigns_and_annotations_is_deleted_whole(client, owner, scientist, annotator,
                                                                       project, other_project, review_version):
    make_job(project, owner, state="succeeded")
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    assert submit(client, campaign, item["id"], answer()).status_code == 201
    kept = make_job(other_project, owner, state="queued")

    services.project_delete(user=owner, project=project, confirm_name=project.name)

    assert not Project.objects.filter(pk=project.pk).exists()
    assert not Campaign.objects.exists() and not Item.objects.exists() and not Annotation.objects.exists()
    assert list(TrainingJob.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not DatasetVersion.objects.filter(dataset__project_id=project.pk).exists()
    assert not RegisteredModel.objects.filter(project_id=project.pk).exists()
    assert DatasetRow.objects.filter(version__dataset__project=other_project).count() == DatasetRow.objects.count()


def test_a_dataset_version_under_a_campaign_cannot_be_deleted_alone(client, scientist, project, review_version):
    from django.db.models import RestrictedError

    client.force_login(scientist)
    make_campaign(client, project, review_version)
    with pytest.raises(RestrictedError):
        review_version.delete()
