"""Readiness and websocket clean-up through the real server (uvicorn with the shipped options):
/readyz stays 200 while people hold live pages, and nothing a closed socket started outlives it."""

import json

import pytest
import requests
from websockets.sync.client import connect

from apps.registry.models import RegisteredModel
from apps.serving.models import Generation
from tests.conftest import wait_for
from tests.core.test_websocket_origin import open_activity_socket, session_cookie

pytestmark = pytest.mark.timeout(90)


def readyz(base_url: str) -> tuple[int, dict]:
    answer = requests.get(f"{base_url}/readyz", timeout=10)
    return answer.status_code, answer.json()


@pytest.mark.smoke
def test_readyz_stays_ready_while_people_hold_live_pages(live_asgi, viewer, project):
    with open_activity_socket(live_asgi, project, viewer, origin=live_asgi) as first, \
            open_activity_socket(live_asgi, project, viewer, origin=live_asgi) as second:
        for socket in (first, second):
            socket.send(json.dumps({"type": "ping"}))
            assert json.loads(socket.recv(timeout=10)) == {"type": "pong"}
        for _ in range(3):
            assert readyz(live_asgi) == (200, {"status": "ok", "checks": {
                "database": "ok", "broker": "ok", "channel_layer": "ok"}})


def test_a_generation_whose_socket_closed_right_after_asking_ends_and_leaves_nothing_behind(
        live_asgi, scientist, project, monkeypatch):
    # Its message waits behind others (no worker takes it): only the socket's going away can end it.
    from apps.serving import services

    monkeypatch.setattr(services, "generation_enqueue", lambda generation_id: None)
    model = RegisteredModel.objects.create(project=project, name="Base", format="hf_dir", source_path="/x",
                                           weights_path="/x", status="ready", info={})
    url = live_asgi.replace("http://", "ws://") + f"/ws/projects/{project.pk}/playground/"
    with connect(url, origin=live_asgi, additional_headers={"Cookie": session_cookie(scientist)},
                 open_timeout=10) as socket:
        socket.send(json.dumps({"type": "generate", "model": model.pk,
                                "messages": [{"role": "user", "content": "Hello"}]}))
        assert json.loads(socket.recv(timeout=10))["type"] == "started"
    generation = wait_for(lambda: Generation.objects.exclude(state=Generation.State.QUEUED).filter(
        project=project).first(), timeout=10, what="the abandoned generation to end")
    assert (generation.state, generation.finish_reason, generation.cancel_requested) == ("succeeded", "cancelled", True)
    assert readyz(live_asgi)[0] == 200  # no receiver of the closed socket holds the channel layer
