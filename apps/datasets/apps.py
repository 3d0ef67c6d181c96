from django.apps import AppConfig
from django.db.models.signals import post_delete


class DatasetsConfig(AppConfig):
    name = "apps.datasets"
    label = "datasets"

    def ready(self) -> None:
        from apps.datasets import search_index
        from apps.datasets.models import DatasetVersion

        post_delete.connect(search_index.on_version_deleted, sender=DatasetVersion,
                            dispatch_uid="datasets.search_index.on_version_deleted")
