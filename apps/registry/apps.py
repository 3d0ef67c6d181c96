from django.apps import AppConfig
from django.db.models.signals import post_save


class RegistryConfig(AppConfig):
    name = "apps.registry"
    label = "registry"
    verbose_name = "Model registry"

    def ready(self) -> None:
        # A new project sees the catalogue's default models (the demo model) at once, however it was made.
        post_save.connect(_project_created, sender="projects.Project", dispatch_uid="registry-catalogue-defaults")


def _project_created(sender, instance, created: bool, raw: bool = False, **kwargs) -> None:
    if created and not raw:
        from apps.registry.services import enable_defaults_for_new_project

        enable_defaults_for_new_project(instance)
