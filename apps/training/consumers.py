from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from apps.projects.events import user_group
from apps.projects.sockets import PolicyConsumer
from apps.training import events, selectors
from apps.training.models import TrainingJob

BACKLOG_CHUNK = 500


class JobConsumer(PolicyConsumer):
    """One job, live: its state, then the backlog of metric points from the database (after
    `?after_step=N` when the client reconnects), then every new point, state change and log line.

    The group is joined before the backlog is read, so no point falls between the two; a point
    can arrive both ways, and clients key points by (kind, step), so it is never shown twice.
    """

    def allowed(self) -> bool:
        job = TrainingJob.objects.select_related("project").filter(
            pk=self.scope["url_route"]["kwargs"]["job_id"]).first()
        self.job_id = job.pk if job else None
        return self.permits("job.view", job)

    def groups_to_join(self) -> list[str]:
        return [events.job_group(self.job_id), user_group(self.scope["user"].pk)]

    async def on_accepted(self) -> None:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        try:
            after_step = max(int(query.get("after_step", ["-1"])[0]), -1)
        except ValueError:
            after_step = -1
        state, chunks, log_tail = await database_sync_to_async(self._backlog)(after_step)
        await self.send_json({"type": "state", "job": state})
        for chunk in chunks:
            await self.send_json({"type": "points", "points": chunk})
        # The log as it stands: a line written between the page's render and this socket's
        # joining would otherwise be lost (lines are live only).
        await self.send_json({"type": "log_tail", "text": log_tail})
        await self.send_json({"type": "live"})

    def _backlog(self, after_step: int) -> tuple[dict, list[list[dict]], str]:
        job = TrainingJob.objects.get(pk=self.job_id)
        points = [{"kind": p.kind, **p.values, "step": p.step}
                  for p in selectors.job_points(job, after_step=after_step if after_step >= 0 else None)]
        return (events.state_payload(job), [points[i:i + BACKLOG_CHUNK] for i in range(0, len(points), BACKLOG_CHUNK)],
                job.log_tail)

    async def job_state(self, message):
        await self.send_json({"type": "state", "job": message["job"]})

    async def job_metric(self, message):
        await self.send_json({"type": "points", "points": [{"kind": message["kind"], **message["point"]}]})

    async def job_log(self, message):
        await self.send_json({"type": "log", "line": message["line"]})
