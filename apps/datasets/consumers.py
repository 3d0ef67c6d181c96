from channels.db import database_sync_to_async

from apps.datasets import events
from apps.datasets.models import DeriveJob, ImportJob
from apps.projects.events import user_group
from apps.projects.sockets import PolicyConsumer


class ImportProgressConsumer(PolicyConsumer):
    """Progress of one import: its current state on connect, then every update live."""

    def allowed(self) -> bool:
        job = ImportJob.objects.select_related("dataset__project").filter(
            pk=self.scope["url_route"]["kwargs"]["import_id"]).first()
        self.job_id = job.pk if job else None
        return self.permits("dataset.view", job.dataset if job else None)

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


class DeriveProgressConsumer(PolicyConsumer):
    """Progress of one derive job (split, PII scan, redaction): its state on connect, then live."""

    def allowed(self) -> bool:
        job = DeriveJob.objects.select_related("parent__dataset__project").filter(
            pk=self.scope["url_route"]["kwargs"]["job_id"]).first()
        self.job_id = job.pk if job else None
        return self.permits("dataset.view", job.parent.dataset if job else None)

    def groups_to_join(self) -> list[str]:
        return [events.derive_group(self.job_id), user_group(self.scope["user"].pk)]

    async def on_accepted(self) -> None:
        payload = await database_sync_to_async(self._current)()  # after joining: no update falls between
        await self.send_json({"type": "progress", "progress": payload})

    def _current(self) -> dict:
        return events.derive_payload(DeriveJob.objects.select_related("parent", "version").get(pk=self.job_id))

    async def derive_progress(self, message):
        await self.send_json({"type": "progress", "progress": message["progress"]})
