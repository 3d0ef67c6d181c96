"""Live progress of derive jobs (ws/derive-jobs/<id>/): the state on connect, then every update
as the job runs, to the end; the policy decides who may listen."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from apps.datasets.derive import run_derive
from apps.datasets.models import Dataset, DeriveJob
from apps.datasets.writer import write_version
from apps.projects.sockets import CLOSE_NOT_FOUND
from tests.projects.test_activity_socket import TIMEOUT_S, headers_for, next_close, run
from workbench.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def split_job(project, owner):
    dataset = Dataset.objects.create(project=project, name="Many", created_by=owner)
    version = write_version(dataset=dataset, author=owner, roles={"prompt": "prompt"},
                            records=[{"prompt": f"row {i}", "label": "ab"[i % 2]} for i in range(12_000)])
    return DeriveJob.objects.create(parent=version, kind=DeriveJob.Kind.SPLIT, created_by=owner,
                                    params={"ratios": {"train": 0.8, "test": 0.2}, "seed": 1, "stratify": False})


def socket_for(job, headers) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/derive-jobs/{job.pk}/", headers=headers)


def test_a_viewer_sees_the_state_then_progress_to_the_new_version(viewer, split_job):
    headers = headers_for(viewer)

    async def scenario():
        socket = socket_for(split_job, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        first = await socket.receive_json_from(timeout=TIMEOUT_S)
        assert first["progress"]["state"] == "queued" and first["progress"]["rows_total"] == 12_000
        await sync_to_async(run_derive)(split_job.pk)
        seen = []
        while not seen or seen[-1]["state"] == "running":
            seen.append((await socket.receive_json_from(timeout=TIMEOUT_S))["progress"])
        assert seen[0]["state"] == "running" and seen[-1]["state"] == "succeeded"
        done = [p["rows_done"] for p in seen if p["state"] == "running"]
        assert done == sorted(done) and max(done) == 12_000  # batches reported in order, to the end
        assert seen[-1]["version"] == 2 and seen[-1]["kind"] == "split"
        await socket.disconnect()

    run(scenario)


def test_someone_outside_the_project_is_closed_with_nothing_sent(outsider, split_job):
    headers = headers_for(outsider)

    async def scenario():
        socket = socket_for(split_job, headers)
        await socket.connect(timeout=TIMEOUT_S)
        close, before = await next_close(socket)
        assert close["code"] == CLOSE_NOT_FOUND and [m for m in before if m["type"] == "websocket.send"] == []

    run(scenario)
