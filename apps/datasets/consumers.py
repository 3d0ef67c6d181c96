from channels.db import database_sync_to_async

from apps.core.consumers import PolicyConsumer
from apps.core.errors import DomainError
from apps.datasets import events
from apps.datasets.models import ImportJob
from apps.projects import policy
from apps.projects.events import user_group


class ImportProgressConsumer(PolicyConsumer):
    """Progress of one import: its current state on connect, then every update live."""

    def allowed(self) -> bool:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.filter(pk=self.scope["user"].pk, is_active=True).first()
        job = ImportJob.objects.select_related("dataset__project").filter(
            pk=self.scope["url_route"]["kwargs"]["import_id"]).first()
        if job is None:
            return False
        try:
            policy.require(user, "dataset.view", job.dataset)
        except DomainError:
            return False
        self.job_id = job.pk
        return True

    def groups_to_join(self) -> list[str]:
        return [events.import_group(self.job_id), user_group(self.scope["user"].pk)]

    async def on_accepted(self) -> None:
        # Joined the group before reading the row, so no update can fall between the two.
        payload = await database_sync_to_async(self._current)()
        await self.send_json({"type": "progress", "progress": payload})

    def _current(self) -> dict:
        return events.progress_payload(ImportJob.objects.select_related("version").get(pk=self.job_id))

    async def import_progress(self, message):
        await self.send_json({"type": "progress", "progress": message["progress"]})
