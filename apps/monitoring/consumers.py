import asyncio

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model

from apps.monitoring import access, broker, events, services
from apps.projects.events import user_group
from apps.projects.sockets import CLOSE_FORBIDDEN, PolicyConsumer


class DashboardConsumer(PolicyConsumer):
    """The monitoring dashboard, live: a snapshot on connect, then one every
    MONITORING_LIVE_INTERVAL_S, and at once when an alert is opened, acknowledged or resolved.
    Site staff only; the check is repeated at every refresh, so an account that lost staff
    rights (or was deactivated) stops receiving within one interval."""

    def allowed(self) -> bool:
        # Read fresh: the connect-time user object predates any change to the account.
        return access.is_site_staff(get_user_model().objects.filter(pk=self.scope["user"].pk).first())

    def groups_to_join(self) -> list[str]:
        return [events.DASHBOARD_GROUP, user_group(self.scope["user"].pk)]

    async def on_accepted(self) -> None:
        # One refresh at a time: a poke during a refresh must not send an older snapshot after a newer one.
        self.refreshing = asyncio.Lock()
        self.ticker = asyncio.ensure_future(self._tick())

    async def disconnect(self, code):
        if getattr(self, "ticker", None):
            self.ticker.cancel()
        await super().disconnect(code)

    async def close(self, code=None, reason=None):
        if getattr(self, "ticker", None) and self.ticker is not asyncio.current_task():
            self.ticker.cancel()
        await super().close(code=code, reason=reason)

    async def _tick(self) -> None:
        try:
            while True:
                if not await self._refresh():
                    return
                await asyncio.sleep(settings.MONITORING_LIVE_INTERVAL_S)
        except OSError:  # the client went away between two refreshes (the server's ClientDisconnected)
            return

    async def _refresh(self) -> bool:
        async with self.refreshing:
            if not await database_sync_to_async(self.allowed)():
                await self.close(code=CLOSE_FORBIDDEN)
                return False
            # The broker round trip (a second when no worker answers) on a thread of its own: on
            # the one thread every socket's database calls share, it would hold them all up.
            inspection = await sync_to_async(broker.recent_inspection, thread_sensitive=False)(
                settings.MONITORING_LIVE_INTERVAL_S / 2)
            snapshot = await database_sync_to_async(services.dashboard_refresh)(inspection=inspection)
            await self.send_json({"type": "snapshot", "snapshot": snapshot})
            return True

    async def dashboard_changed(self, message):
        await self._refresh()
