"""The project activity websocket (ws/projects/<id>/activity/) through the real ASGI application:
Origin check, session authentication, the policy check, the message budget and live revocation,
over the Redis channel layer configured in settings.

Each test is synchronous and runs its scenario with async_to_sync; domain calls go through
sync_to_async, so their on-commit publishing reaches the channel layer as in production.
"""

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.projects import services
from apps.projects.models import Membership
from apps.projects.sockets import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_RATE_LIMITED, PolicyConsumer
from workbench.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

ALLOWED_ORIGIN = b"http://127.0.0.1"
ALLOWED_HOST = b"127.0.0.1"
TIMEOUT_S = 5


def headers_for(user=None, origin: bytes = ALLOWED_ORIGIN) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", origin), (b"host", ALLOWED_HOST)]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers


def socket_for(project, headers) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/projects/{project.pk}/activity/", headers=headers)


SCENARIO_TIMEOUT_S = 60
CLEANUP_TIMEOUT_S = 10


def run(scenario) -> None:
    """Run a socket scenario on its own event loop and channel layer (tests/conftest.py keeps a
    layer per thread: one per loop), within a deadline. What the scenario leaves running (a
    consumer the server closed but the client never disconnected) is cancelled with a deadline
    too: a task that ignores cancellation fails the test, with its stack, instead of hanging the
    event loop's shutdown."""
    async_to_sync(_bounded)(scenario)


async def _bounded(scenario) -> None:
    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)  # a thread reused for another loop starts afresh
    try:
        async with asyncio.timeout(SCENARIO_TIMEOUT_S):
            await scenario()
    finally:
        current = asyncio.current_task()
        leftovers = [task for task in asyncio.all_tasks() if task is not current and not task.done()]
        for task in leftovers:
            task.cancel()
        if leftovers:
            _, stuck = await asyncio.wait(leftovers, timeout=CLEANUP_TIMEOUT_S)
            if stuck:
                stacks = []
                for task in stuck:
                    stacks.append(f"{task!r} awaiting:\n" + "\n".join(_awaiting(task.get_coro())))
                raise AssertionError(f"{len(stuck)} task(s) ignored cancellation:\n" + "\n".join(stacks))


def _awaiting(coroutine) -> list[str]:
    """The chain of frames a suspended coroutine waits in, innermost last (a task's own stack
    stops at its outermost frame)."""
    lines = []
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "ag_frame", None)
        if frame is not None:
            lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "ag_await", None)
    return lines


async def connected_socket(project, headers) -> WebsocketCommunicator:
    socket = socket_for(project, headers)
    connected, _ = await socket.connect(timeout=TIMEOUT_S)
    assert connected, "a member's handshake was refused"
    return socket


async def next_close(socket) -> tuple[dict, list[dict]]:
    """Read until the server closes the socket; returns the close and what came before it."""
    before = []
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        output = await socket.receive_output(timeout=max(deadline - time.monotonic(), 0.01))
        if output["type"] == "websocket.close":
            return output, before
        before.append(output)


def test_a_member_receives_activity_when_an_audit_event_is_recorded_in_the_project(owner, viewer, project):
    headers = headers_for(viewer)

    async def scenario():
        socket = await connected_socket(project, headers)
        await sync_to_async(services.project_update)(user=owner, project=project, description="Now live")
        message = await socket.receive_json_from(timeout=TIMEOUT_S)
        assert message["type"] == "activity"
        assert message["event"]["action"] == "project.update"
        assert message["event"]["actor"] == "olivia"
        assert message["event"]["target"] == "Alpha"
        # Only the summary travels: before/after (here, the description) never reach the socket.
        assert set(message["event"]) == {"id", "action", "actor", "target", "created_at"}
        assert await socket.receive_nothing(timeout=0.2)
        await socket.disconnect()

    run(scenario)


def test_activity_of_another_project_does_not_reach_a_member(owner, viewer, project, other_project, outsider):
    headers = headers_for(viewer)

    async def scenario():
        socket = await connected_socket(project, headers)
        await sync_to_async(services.project_update)(user=outsider, project=other_project, description="Elsewhere")
        assert await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()

    run(scenario)


def test_an_unauthenticated_handshake_is_rejected(project):
    headers = headers_for(None)

    async def scenario():
        socket = socket_for(project, headers)
        connected, _ = await socket.connect(timeout=TIMEOUT_S)
        assert not connected

    run(scenario)


def test_a_handshake_from_a_foreign_origin_is_rejected_even_with_a_valid_session(viewer, project):
    headers = headers_for(viewer, origin=b"https://evil.example")

    async def scenario():
        socket = socket_for(project, headers)
        connected, _ = await socket.connect(timeout=TIMEOUT_S)
        assert not connected

    run(scenario)


def test_an_outsider_is_closed_with_4404_and_receives_nothing(owner, outsider, project):
    headers = headers_for(outsider)

    async def scenario():
        socket = socket_for(project, headers)
        connected, _ = await socket.connect(timeout=TIMEOUT_S)
        assert connected  # accepted, then closed at once: no hint whether the project exists
        close, before = await next_close(socket)
        assert close["code"] == CLOSE_NOT_FOUND
        assert before == []
        await sync_to_async(services.project_update)(user=owner, project=project, description="Secret")
        assert await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()

    run(scenario)


def test_an_unknown_project_looks_like_an_invisible_one(viewer, project):
    headers = headers_for(viewer)

    async def scenario():
        socket = WebsocketCommunicator(application, f"/ws/projects/{project.pk + 1000}/activity/",
                                       headers=headers)
        connected, _ = await socket.connect(timeout=TIMEOUT_S)
        assert connected
        close, before = await next_close(socket)
        assert (close["code"], before) == (CLOSE_NOT_FOUND, [])
        await socket.disconnect()

    run(scenario)


@pytest.mark.parametrize("frame", [{"text_data": "{not json"}, {"text_data": "[1, 2]"},
                                   {"text_data": '{"type": 7}'}, {"bytes_data": b"\x00\x01"},
                                   {"text_data": '{"type": "ping", "pad": "' + "x" * 5000 + '"}'}],
                         ids=["malformed-json", "not-an-object", "type-not-a-string", "binary", "too-large"])
def test_a_bad_message_gets_an_error_reply_and_the_socket_stays_open(viewer, project, frame):
    headers = headers_for(viewer)

    async def scenario():
        socket = await connected_socket(project, headers)
        await socket.send_to(**frame)
        reply = await socket.receive_json_from(timeout=TIMEOUT_S)
        assert reply["type"] == "error"
        assert reply["detail"]
        await socket.send_json_to({"type": "ping"})
        assert await socket.receive_json_from(timeout=TIMEOUT_S) == {"type": "pong"}
        await socket.disconnect()

    run(scenario)


def test_ping_gets_pong(viewer, project):
    headers = headers_for(viewer)

    async def scenario():
        socket = await connected_socket(project, headers)
        await socket.send_json_to({"type": "ping"})
        assert await socket.receive_json_from(timeout=TIMEOUT_S) == {"type": "pong"}
        await socket.disconnect()

    run(scenario)


def test_more_than_twenty_messages_in_ten_seconds_closes_the_socket_with_4429(viewer, project):
    budget = PolicyConsumer.max_messages_per_window
    assert (budget, PolicyConsumer.window_s) == (20, 10.0)

    headers = headers_for(viewer)

    async def scenario():
        socket = await connected_socket(project, headers)
        for _ in range(budget + 1):
            await socket.send_json_to({"type": "ping"})
        close, before = await next_close(socket)
        assert close["code"] == CLOSE_RATE_LIMITED
        assert [b["text"] for b in before] == ['{"type": "pong"}'] * budget
        await socket.disconnect()

    run(scenario)


def test_a_member_removed_while_connected_is_closed_with_4403_within_five_seconds(owner, viewer, project):
    membership = Membership.objects.get(project=project, user=viewer)

    headers = headers_for(viewer)

    async def scenario():
        socket = await connected_socket(project, headers)
        started = time.monotonic()
        await sync_to_async(services.member_remove)(actor=owner, membership=membership)
        close, before = await next_close(socket)
        assert close["code"] == CLOSE_FORBIDDEN
        assert time.monotonic() - started < TIMEOUT_S
        # At most the activity line of the removal itself may arrive first.
        assert all('"member.remove"' in b.get("text", "") for b in before)
        # The server then reports the closed connection; the consumer must end (else this times out).
        await socket.disconnect(timeout=TIMEOUT_S)

    run(scenario)


def test_a_member_whose_role_changes_stays_connected(owner, admin, viewer, project):
    membership = Membership.objects.get(project=project, user=viewer)

    headers = headers_for(viewer)

    async def scenario():
        socket = await connected_socket(project, headers)
        await sync_to_async(services.member_change_role)(actor=admin, membership=membership, role="annotator")
        message = await socket.receive_json_from(timeout=TIMEOUT_S)
        assert message["event"]["action"] == "member.role_change"
        await socket.send_json_to({"type": "ping"})
        assert await socket.receive_json_from(timeout=TIMEOUT_S) == {"type": "pong"}
        await socket.disconnect()

    run(scenario)
