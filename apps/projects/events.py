"""Publishing to websocket groups. Domain code calls these; consumers only forward.

Groups: `project.<id>` (everyone watching a project) and `user.<id>` (every socket of one
person, so revoking their access can close them at once).
"""

import asyncio
import logging
import os
import threading

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


def project_group(project_id: int) -> str:
    return f"project.{project_id}"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


PUBLISH_TIMEOUT_S = 5.0
_publisher: tuple[int, asyncio.AbstractEventLoop] | None = None
_publisher_lock = threading.Lock()


def _publisher_loop() -> asyncio.AbstractEventLoop:
    """One event loop per process, on a daemon thread, that every publish runs on: the Redis
    channel layer keeps its connections per event loop, so they are opened once, not once per
    message (async_to_sync would make a new loop, and a new connection, for every call). A forked
    child (a Celery pool process) starts its own."""
    global _publisher
    with _publisher_lock:
        if _publisher is None or _publisher[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="channel-publisher", daemon=True).start()
            _publisher = (os.getpid(), loop)
        return _publisher[1]


def send(group: str, message: dict) -> None:
    """Publish to a channel-layer group from sync code, in order, best effort (the database stays
    the record; a slow or absent Redis costs at most PUBLISH_TIMEOUT_S)."""
    try:
        future = asyncio.run_coroutine_threadsafe(get_channel_layer().group_send(group, message), _publisher_loop())
        future.result(timeout=PUBLISH_TIMEOUT_S)
    except Exception:  # live updates are best effort
        logger.exception("could not publish %s to %s", message.get("type"), group)


def access_revoked(*, user_id: int, project_id: int) -> None:
    """Tell every open socket of this user to re-check its access to this project."""
    send(user_group(user_id), {"type": "access.revoked", "project_id": project_id})


def activity_published(*, project_id: int, event: dict) -> None:
    send(project_group(project_id), {"type": "activity.event", "event": event})
