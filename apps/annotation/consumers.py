import asyncio
import time

from channels.db import database_sync_to_async

from apps.annotation import events
from apps.projects.events import user_group
from apps.projects.sockets import PolicyConsumer

RECOUNT_EVERY_S = 1.0


class CampaignProgressConsumer(PolicyConsumer):
    """A campaign's progress for whoever may see the campaign: on connect, then again after
    answers change (counted at most once every RECOUNT_EVERY_S, the last change always counted).
    Its managers and reviewers, when they ask (?tables=1, the dashboard), also get the agreement
    and annotator tables, rendered as the page renders them, and the numbers behind its charts."""

    def allowed(self) -> bool:
        from django.contrib.auth import get_user_model

        from apps.annotation import services
        from apps.core.errors import DomainError

        self.campaign_id = self.scope["url_route"]["kwargs"]["campaign_id"]
        user = get_user_model().objects.filter(pk=self.scope["user"].pk, is_active=True).first()
        try:
            return user is not None and services.visible_campaign(user, self.campaign_id) is not None
        except DomainError:
            return False

    def groups_to_join(self) -> list[str]:
        return [events.campaign_group(self.campaign_id), user_group(self.scope["user"].pk)]

    async def on_accepted(self) -> None:
        # Only the dashboard asks for the tables (?tables=1): they cost a pass over every answer.
        self.wants_tables = b"tables=1" in self.scope.get("query_string", b"").split(b"&")
        self.counted_at, self.dirty, self.recount = 0.0, False, None
        await self._send_progress()

    async def campaign_changed(self, message) -> None:
        # Never wait here: the messages behind this one (a revocation among them) keep flowing.
        self.dirty = True
        if self.recount is None or self.recount.done():
            self.recount = asyncio.ensure_future(self._recount())

    async def _recount(self) -> None:
        while self.dirty:  # a change that arrives while counting gets a count of its own
            await asyncio.sleep(max(0.0, self.counted_at + RECOUNT_EVERY_S - time.monotonic()))
            self.dirty = False
            await self._send_progress()

    async def disconnect(self, code):
        if getattr(self, "recount", None) is not None:
            self.recount.cancel()
        await super().disconnect(code)

    async def _send_progress(self) -> None:
        self.counted_at = time.monotonic()
        message = await database_sync_to_async(self._message)()
        await self.send_json(message)

    def _message(self) -> dict:
        from django.contrib.auth import get_user_model
        from django.template.loader import render_to_string

        from apps.annotation import quality, services
        from apps.annotation.models import Campaign
        from apps.projects import policy

        campaign = Campaign.objects.select_related("project", "schema").get(pk=self.campaign_id)
        progress = services.progress(campaign)
        if campaign.suggestion_model_id:
            progress["suggestions"] = {"state": campaign.suggestion_state, **campaign.suggestion_progress}
        message = {"type": "progress", "progress": progress}
        # Asked at every count: a reviewer who loses the role stops getting the tables at once.
        if not self.wants_tables:
            return message
        user = get_user_model().objects.filter(pk=self.scope["user"].pk, is_active=True).first()
        if user is not None and policy.project_permissions(user, campaign.project) & REVIEWERS:
            numbers = quality.campaign_quality(campaign)
            message["quality"] = numbers
            message["quality_html"] = render_to_string("annotation/_quality.html", {"quality": numbers})
        return message


REVIEWERS = frozenset({"campaign.manage", "annotation.review"})
