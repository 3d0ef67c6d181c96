from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "apps.projects"
    label = "projects"

    def ready(self):
        from django.db.models.signals import post_delete, post_save

        from apps.core import principal_cache
        from apps.projects.models import Membership, Role

        def outdate_permissions(sender, **kwargs):  # a role or membership changed: every process reads again
            principal_cache.outdate()

        for model in (Membership, Role):
            for signal in (post_save, post_delete):
                signal.connect(outdate_permissions, sender=model, weak=False,
                               dispatch_uid=f"workbench.outdate_permissions.{model.__name__}.{signal is post_save}")
