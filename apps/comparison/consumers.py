from channels.db import database_sync_to_async

from apps.comparison import events, selectors
from apps.comparison.models import Comparison
from apps.projects.events import user_group
from apps.projects.sockets import PolicyConsumer

BACKLOG_CHUNK = 200


class ComparisonConsumer(PolicyConsumer):
    """One comparison, live: its state, then every stored cell from the database, then each new
    batch of cells and state change. The group is joined before the backlog is read, so no cell
    falls between the two; clients key cells by (prompt, contestant), so one that arrives both
    ways is shown once."""

    def allowed(self) -> bool:
        comparison = Comparison.objects.select_related("project").filter(
            pk=self.scope["url_route"]["kwargs"]["comparison_id"]).first()
        self.comparison_id = comparison.pk if comparison else None
        return self.permits("compare.view", comparison)

    def groups_to_join(self) -> list[str]:
        return [events.comparison_group(self.comparison_id), user_group(self.scope["user"].pk)]

    async def on_accepted(self) -> None:
        state, cells, summaries = await database_sync_to_async(self._backlog)()
        await self.send_json({"type": "state", "comparison": state})
        for start in range(0, len(cells), BACKLOG_CHUNK):
            await self.send_json({"type": "cells", "cells": cells[start:start + BACKLOG_CHUNK]})
        await self.send_json({"type": "summaries", "summaries": summaries})
        await self.send_json({"type": "live"})

    def _backlog(self) -> tuple[dict, list[dict], list[dict]]:
        comparison = Comparison.objects.filter(pk=self.comparison_id).first()
        if comparison is None:
            return {"id": self.comparison_id, "state": "deleted"}, [], []
        return events.state_payload(comparison), selectors.grid_cells(comparison), selectors.model_summaries(comparison)

    async def comparison_state(self, message):
        await self.send_json({"type": "state", "comparison": message["comparison"]})

    async def comparison_cells(self, message):
        await self.send_json({"type": "cells", "cells": message["cells"]})
        await self.send_json({"type": "summaries", "summaries": message["summaries"]})
