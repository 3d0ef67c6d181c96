"""Writing the audit log. Every service that changes something security-relevant calls this."""

from django.db import transaction

from apps.projects import events
from apps.projects.models import AuditEvent, Project


def audit_record(*, actor, action: str, project: Project | None = None, target=None,
                 ip_address: str | None = None, before: dict | None = None, after: dict | None = None,
                 publish: bool = True) -> AuditEvent:
    """Append who did what. `publish=False` keeps routine, high-volume work (each annotation,
    each vote) out of the live activity feed; it is in the audit log all the same."""
    event = AuditEvent.objects.create(
        project=project,
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        target_repr=str(target)[:200] if target is not None else "",
        ip_address=ip_address,
        before=before,
        after=after,
    )
    if project is not None and publish:
        # Members see it appear on the dashboard; only the summary travels, never before/after.
        summary = activity_summary(event)
        transaction.on_commit(lambda: events.activity_published(project_id=project.pk, event=summary))
    return event


def activity_summary(event: AuditEvent) -> dict:
    return {"id": event.pk, "action": event.action, "actor": event.actor.username if event.actor else "system",
            "target": event.target_repr, "created_at": event.created_at.isoformat()}
