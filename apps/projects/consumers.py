from apps.projects import events
from apps.projects.models import Project
from apps.projects.sockets import PolicyConsumer


class ProjectActivityConsumer(PolicyConsumer):
    """Live activity of one project (the dashboard's feed)."""

    def allowed(self) -> bool:
        self.project = Project.objects.filter(pk=self.scope["url_route"]["kwargs"]["project_id"]).first()
        return self.permits("project.view", self.project)

    def groups_to_join(self) -> list[str]:
        return [events.project_group(self.project.pk), events.user_group(self.scope["user"].pk)]

    async def activity_event(self, message):
        await self.send_json({"type": "activity", "event": message["event"]})
