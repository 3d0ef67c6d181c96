"""The job websocket (ws/jobs/<id>/) through the real ASGI application and the Redis channel
layer: state, then the backlog from the database, then live points; the policy at connect and
on revocation; malformed and flooding clients."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from apps.projects import services
from apps.projects.models import Membership
from apps.projects.sockets import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_RATE_LIMITED, PolicyConsumer
from apps.training.models import MetricPoint
from tests.projects.test_activity_socket import ALLOWED_ORIGIN, TIMEOUT_S, headers_for, next_close, run
from tests.training.fixtures import make_job
from workbench.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def job_socket(job, headers, query="") -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/{query}", headers=headers)


def point(step: int) -> dict:
    return {"step": step, "loss": 2.0 / step, "lr": 1e-4, "grad_norm": 1.0, "tokens_per_s": 100.0,
            "tokens_seen": 64 * step}


@pytest.fixture
def job_with_points(project, owner):
    job = make_job(project, owner, current_step=5)
    MetricPoint.objects.bulk_create([MetricPoint(job=job, kind="train", step=s, values=point(s)) for s in range(1, 6)])
    MetricPoint.objects.create(job=job, kind="eval", step=4, values={"step": 4, "eval_loss": 1.5, "samples": []})
    return job


async def read_until_live(socket) -> tuple[dict, list[dict]]:
    state, points = None, []
    while True:
        message = await socket.receive_json_from(timeout=TIMEOUT_S)
        if message["type"] == "state":
            state = message["job"]
        elif message["type"] == "points":
            points.extend(message["points"])
        elif message["type"] == "live":
            return state, points


def test_a_viewer_gets_the_state_then_the_backlog_then_live_points_each_once(viewer, job_with_points):
    from apps.training.runner import JobCallbacks

    job = job_with_points
    headers = headers_for(viewer)
    callbacks = JobCallbacks(job)

    async def scenario():
        socket = job_socket(job, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        state, backlog = await read_until_live(socket)
        assert state["state"] == "running" and state["current_step"] == 5
        assert [(p["kind"], p["step"]) for p in backlog] == [
            ("train", 1), ("train", 2), ("train", 3), ("eval", 4), ("train", 4), ("train", 5)]
        # The worker reports step 6: it reaches the socket live, once.
        await sync_to_async(callbacks.on_step)(point(6))
        message = await socket.receive_json_from(timeout=TIMEOUT_S)
        assert message == {"type": "points", "points": [{"kind": "train", **point(6)}]}
        assert await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()

    run(scenario)
    assert MetricPoint.objects.filter(job=job, kind="train").count() == 6


def test_a_reconnecting_client_gets_only_the_points_after_the_step_it_had(viewer, job_with_points):
    headers = headers_for(viewer)

    async def scenario():
        socket = job_socket(job_with_points, headers, "?after_step=4")
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        _, backlog = await read_until_live(socket)
        assert [(p["kind"], p["step"]) for p in backlog] == [("train", 5)]
        await socket.disconnect()

    run(scenario)


def test_a_resumed_step_replaces_its_point_instead_of_adding_one(viewer, job_with_points):
    from apps.training.runner import JobCallbacks

    JobCallbacks(job_with_points).on_step({**point(5), "loss": 0.123})
    points = MetricPoint.objects.filter(job=job_with_points, kind="train", step=5)
    assert points.count() == 1 and points.get().values["loss"] == 0.123


@pytest.mark.parametrize("persona", ["outsider", "annotator"])  # another project's; no job.view
def test_people_who_may_not_see_the_job_are_closed_with_4404_and_sent_nothing(request, job_with_points, persona):
    headers = headers_for(request.getfixturevalue(persona))

    async def scenario():
        socket = job_socket(job_with_points, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        close, before = await next_close(socket)
        assert close["code"] == CLOSE_NOT_FOUND and before == []
        await socket.disconnect()

    run(scenario)


@pytest.mark.parametrize("origin, logged_in", [(ALLOWED_ORIGIN, False), (b"https://evil.example", True)])
def test_unauthenticated_or_foreign_origin_handshakes_are_rejected(viewer, job_with_points, origin, logged_in):
    headers = headers_for(viewer if logged_in else None, origin=origin)

    async def scenario():
        socket = job_socket(job_with_points, headers)
        connected, _ = await socket.connect(timeout=TIMEOUT_S)
        assert not connected
        await socket.disconnect()

    run(scenario)


def test_malformed_messages_get_an_error_and_a_flood_closes_the_socket(viewer, job_with_points):
    headers = headers_for(viewer)

    async def scenario():
        socket = job_socket(job_with_points, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        await read_until_live(socket)
        await socket.send_to(text_data="{not json")
        assert (await socket.receive_json_from(timeout=TIMEOUT_S))["type"] == "error"
        for _ in range(PolicyConsumer.max_messages_per_window):
            await socket.send_json_to({"type": "ping"})
        close, _ = await next_close(socket)
        assert close["code"] == CLOSE_RATE_LIMITED
        await socket.disconnect()

    run(scenario)


def test_a_viewer_removed_while_watching_is_disconnected(owner, viewer, project, job_with_points):
    membership = Membership.objects.get(project=project, user=viewer)

    headers = headers_for(viewer)

    async def scenario():
        socket = job_socket(job_with_points, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        await read_until_live(socket)
        await sync_to_async(services.member_remove)(actor=owner, membership=membership)
        close, _ = await next_close(socket)
        assert close["code"] == CLOSE_FORBIDDEN
        await socket.disconnect(timeout=TIMEOUT_S)

    run(scenario)


def test_the_log_as_stored_comes_before_live_lines_so_a_line_written_before_joining_is_not_lost(viewer, project,
                                                                                                 owner):
    job = make_job(project, owner, log_tail="10:00:00 started: 30 steps on cpu")
    headers = headers_for(viewer)

    async def scenario():
        socket = job_socket(job, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        kinds = []
        while True:
            message = await socket.receive_json_from(timeout=TIMEOUT_S)
            kinds.append(message["type"])
            if message["type"] == "log_tail":
                assert message["text"] == "10:00:00 started: 30 steps on cpu"
            if message["type"] == "live":
                break
        assert kinds.index("log_tail") < kinds.index("live")
        await socket.disconnect()

    run(scenario)
