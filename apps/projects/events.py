"""Publishing to websocket groups. Domain code calls these; consumers only forward.

Groups: `project.<id>` (everyone watching a project) and `user.<id>` (every socket of one
person, so revoking their access can close them at once).
"""

import asyncio
import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


def project_group(project_id: int) -> str:
    return f"project.{project_id}"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def send(group: str, message: dict) -> None:
    """Publish to a channel-layer group, best effort, from any sync context."""
    def publish():
        try:
            async_to_sync(get_channel_layer().group_send)(group, message)
        except Exception:  # live updates are best effort; the database stays the record
            logger.exception("could not publish %s to %s", message.get("type"), group)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        publish()
    else:
        # Sync code running on a thread that owns an event loop cannot block on it: publish
        # from a helper thread instead.
        worker = threading.Thread(target=publish)
        worker.start()
        worker.join()


def access_revoked(*, user_id: int, project_id: int) -> None:
    """Tell every open socket of this user to re-check its access to this project."""
    send(user_group(user_id), {"type": "access.revoked", "project_id": project_id})


def activity_published(*, project_id: int, event: dict) -> None:
    send(project_group(project_id), {"type": "activity.event", "event": event})
