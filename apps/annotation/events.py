"""Live campaign progress: a submission (or a step of the model suggestions) tells the campaign's
open dashboards that it changed; each dashboard's socket counts again (at most once a second),
so a submission only sends one small message and does no counting of its own."""

from apps.projects.events import send


def campaign_group(campaign_id: int) -> str:
    return f"campaign.{campaign_id}"


def campaign_changed(campaign_id: int) -> None:
    """Answers or suggestions moved: the campaign's open dashboards count again."""
    send(campaign_group(campaign_id), {"type": "campaign.changed"})
