from django.db import IntegrityError, transaction

from apps.core.errors import Invalid
from apps.datasets.models import Dataset
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Project


@transaction.atomic
def dataset_create(*, user, project: Project, name: str, description: str = "", token=None,
                   ip_address: str | None = None) -> Dataset:
    policy.require(user, "dataset.import", project, token)
    name = " ".join((name or "").split())
    if not name:
        raise Invalid("A dataset needs a name.", field="name")
    if len(name) > 120:
        raise Invalid("Dataset names are at most 120 characters.", field="name")
    if project.datasets.filter(name__iexact=name).exists():
        raise Invalid(f"This project already has a dataset called “{name}”.", field="name")
    try:
        with transaction.atomic():
            dataset = Dataset.objects.create(project=project, name=name, description=(description or "").strip(),
                                             created_by=user)
    except IntegrityError:  # a concurrent create of the same name
        raise Invalid(f"This project already has a dataset called “{name}”.", field="name") from None
    audit_record(actor=user, action="dataset.create", project=project, target=dataset, ip_address=ip_address,
                 after={"name": name})
    return dataset


@transaction.atomic
def dataset_delete(*, user, dataset: Dataset, token=None, ip_address: str | None = None) -> None:
    policy.require(user, "dataset.delete", dataset, token)
    audit_record(actor=user, action="dataset.delete", project=dataset.project, target=dataset,
                 ip_address=ip_address, before={"name": dataset.name})
    dataset.delete()
