from apps.core.consumers import PolicyConsumer
from apps.core.errors import DomainError
from apps.projects import events, policy


class ProjectActivityConsumer(PolicyConsumer):
    """Live activity of one project (the dashboard's feed)."""

    def allowed(self) -> bool:
        from django.contrib.auth import get_user_model

        # A fresh user object: the connect-time one caches permissions from before a change.
        user = get_user_model().objects.filter(pk=self.scope["user"].pk, is_active=True).first()
        try:
            self.project = policy.get_project(user, self.scope["url_route"]["kwargs"]["project_id"])
        except DomainError:
            return False
        return True

    def groups_to_join(self) -> list[str]:
        return [events.project_group(self.project.pk), events.user_group(self.scope["user"].pk)]

    async def activity_event(self, message):
        await self.send_json({"type": "activity", "event": message["event"]})
