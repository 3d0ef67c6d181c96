"""Writing the audit log. Every service that changes something security-relevant calls this."""

from apps.projects.models import AuditEvent, Project


def audit_record(*, actor, action: str, project: Project | None = None, target=None,
                 ip_address: str | None = None, before: dict | None = None, after: dict | None = None) -> AuditEvent:
    return AuditEvent.objects.create(
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
