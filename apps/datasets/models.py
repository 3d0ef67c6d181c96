from django.conf import settings
from django.db import models
from django.db.models.functions import Lower

from apps.projects.permissions import object_permission_choices


class Dataset(models.Model):
    """A named collection of immutable versions inside a project (versions come with imports)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True, max_length=5000)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        default_permissions = ()
        permissions = object_permission_choices("dataset")
        constraints = [models.UniqueConstraint(Lower("name"), "project", name="unique_dataset_name_per_project")]

    def __str__(self) -> str:
        return self.name
