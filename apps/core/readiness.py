"""Checks behind /readyz: can this process reach everything it needs to serve?"""

import asyncio
import uuid

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection

from workbench.celery import app as celery_app

CHECK_TIMEOUT_S = 2.0


def check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_broker() -> None:
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT_S)


async def _channel_round_trip() -> None:
    """Send to and receive from a channel of its own. Not a process-local (`!`) channel: those
    share one receive lock per process with every open socket's consumer, which holds it while it
    waits, so the probe would time out whenever anyone had a live page."""
    layer = get_channel_layer()
    channel = f"readyz.{uuid.uuid4().hex}"
    token = uuid.uuid4().hex
    await layer.send(channel, {"type": "readyz.ping", "token": token})
    async with asyncio.timeout(CHECK_TIMEOUT_S):
        message = await layer.receive(channel)
    if message.get("token") != token:
        raise RuntimeError("channel layer returned a different message")


def check_channel_layer() -> None:
    async_to_sync(_channel_round_trip)()


CHECKS = {"database": check_database, "broker": check_broker, "channel_layer": check_channel_layer}


def run_checks() -> dict[str, str]:
    """Each check's outcome: "ok", or the error's class name (never its text: it may hold URLs)."""
    results = {}
    for name, check in CHECKS.items():
        try:
            check()
        except Exception as exc:  # a readiness probe reports any failure, it never raises
            results[name] = f"error: {type(exc).__name__}"
        else:
            results[name] = "ok"
    return results
