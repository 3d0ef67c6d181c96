"""The live dashboard (ws/monitoring/) through the real ASGI application and Redis channel layer:
site staff get a snapshot at once and fresh ones on a timer and when an alert changes; anyone
else is refused, and staff who lose their rights are cut off at the next refresh."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from apps.monitoring import services
from apps.monitoring.models import Alert
from apps.projects.sockets import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND
from tests.monitoring.conftest import failed_training_job
from tests.projects.test_activity_socket import TIMEOUT_S, headers_for, next_close, run
from workbench.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_refresh(settings, no_workers, clean_request_window, clean_queue_history):
    settings.MONITORING_LIVE_INTERVAL_S = 0.3
    settings.ALERT_WEBHOOK_URL = None


async def connected(headers) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, "/ws/monitoring/", headers=headers)
    assert (await socket.connect(timeout=TIMEOUT_S))[0]
    return socket


async def next_snapshot(socket, until=lambda snapshot: True) -> dict:
    for _ in range(50):
        message = await socket.receive_json_from(timeout=TIMEOUT_S)
        assert message["type"] == "snapshot"
        if until(message["snapshot"]):
            return message["snapshot"]
    raise AssertionError("no snapshot matched")


def test_staff_see_a_failure_arrive_on_the_live_tiles_without_asking(staff, project, owner):
    headers = headers_for(staff)

    async def scenario():
        socket = await connected(headers)
        first = await next_snapshot(socket)
        assert first["tiles"]["failures"] == 0 and first["tiles"]["open_alerts"] == 0
        assert first["tiles"]["workers_online"] == 0 and set(first["tiles"]["queues"]) >= {"default", "gpu"}
        await sync_to_async(failed_training_job)(project, owner, name="Night run")
        later = await next_snapshot(socket, until=lambda s: s["tiles"]["failures"] == 1)
        assert later["tiles"]["open_alerts"] == 1 and later["tiles"]["unacknowledged_alerts"] == 1
        assert "Night run" in later["alerts"][0]["message"]
        assert len(later["history"]["queues"]) == 1  # sampled once: the next sample waits SAMPLE_EVERY_S
        await socket.disconnect()

    run(scenario)


def test_an_acknowledgement_reaches_every_open_dashboard_at_once(staff, site_admin, project, owner, settings):
    failed_training_job(project, owner)
    services.alerts_evaluate()
    alert = Alert.objects.get()
    headers = headers_for(staff)
    settings.MONITORING_LIVE_INTERVAL_S = 60  # only the acknowledgement can bring the next snapshot

    async def scenario():
        socket = await connected(headers)
        assert (await next_snapshot(socket))["tiles"]["unacknowledged_alerts"] == 1
        await sync_to_async(services.alert_acknowledge)(by=site_admin, alert=alert)
        snapshot = await next_snapshot(socket)
        assert snapshot["tiles"]["unacknowledged_alerts"] == 0 and snapshot["tiles"]["open_alerts"] == 1
        assert snapshot["alerts"][0]["acknowledged_by"] == "root"
        await socket.disconnect()

    run(scenario)


@pytest.mark.parametrize("persona", ["owner", "admin", "outsider"])
def test_a_non_admin_is_closed_with_nothing_sent(persona, request):
    headers = headers_for(request.getfixturevalue(persona))

    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/monitoring/", headers=headers)
        await socket.connect(timeout=TIMEOUT_S)
        close, before = await next_close(socket)
        assert close["code"] == CLOSE_NOT_FOUND and [m for m in before if m["type"] == "websocket.send"] == []

    run(scenario)


def test_an_anonymous_handshake_is_refused():
    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/monitoring/", headers=headers_for(None))
        connected, _ = await socket.connect(timeout=TIMEOUT_S)
        assert not connected

    run(scenario)


def test_staff_who_lose_their_rights_are_cut_off_at_the_next_refresh(staff):
    headers = headers_for(staff)

    async def scenario():
        socket = await connected(headers)
        await next_snapshot(socket)
        staff.is_staff = False
        await sync_to_async(staff.save)()
        close, _ = await next_close(socket)
        assert close["code"] == CLOSE_FORBIDDEN

    run(scenario)
