"""Open dashboards share the broker: one inspection of the workers serves every live dashboard
of a web process, and it runs off the thread that every socket's database calls share (the real ping
waits its full second for late answers, whoever answers)."""

import asyncio

import pytest
from channels.db import database_sync_to_async

from apps.monitoring import broker
from tests.monitoring.test_dashboard_socket import connected, next_snapshot
from tests.projects.test_activity_socket import headers_for, run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def slow_refresh(settings, clean_request_window, clean_queue_history):
    settings.MONITORING_LIVE_INTERVAL_S = 60
    settings.ALERT_WEBHOOK_URL = None


def test_two_open_dashboards_share_one_inspection_of_the_workers(staff, site_admin):
    staff_headers, admin_headers = headers_for(staff), headers_for(site_admin)

    async def scenario():
        first = await connected(staff_headers)
        second = await connected(admin_headers)
        one, other = await next_snapshot(first), await next_snapshot(second)
        # (the suite's own Celery workers may answer too: only sameness is asserted)
        assert one["tiles"]["workers_online"] == other["tiles"]["workers_online"] is not None
        assert one["tiles"]["workers_asked_at"] == other["tiles"]["workers_asked_at"]
        await first.disconnect()
        await second.disconnect()

    run(scenario)


def test_other_sockets_reach_the_database_while_a_dashboard_waits_on_the_broker(staff):
    headers = headers_for(staff)

    async def scenario():
        socket = await connected(headers)
        for _ in range(500):  # until the dashboard's first refresh is asking the broker
            if broker._latest_lock.locked():
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the dashboard never asked the broker")
        # A database call of any other socket of this process: it runs while the ping still waits.
        inspected_before = await database_sync_to_async(lambda: broker._latest is not None)()
        assert not inspected_before
        snapshot = await next_snapshot(socket)
        assert snapshot["tiles"]["workers_online"] is not None and broker._latest is not None
        await socket.disconnect()

    run(scenario)
