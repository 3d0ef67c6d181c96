"""Live campaign progress: a submission tells the campaign's open dashboards that its answers
changed; each dashboard's socket counts again (at most once a second), so a submission only
sends one small message and does no counting of its own."""

from apps.projects.events import send


def campaign_group(campaign_id: int) -> str:
    return f"campaign.{campaign_id}"


def answers_changed(campaign_id: int) -> None:
    send(campaign_group(campaign_id), {"type": "campaign.changed"})
