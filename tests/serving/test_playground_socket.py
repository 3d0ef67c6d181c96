"""The playground websocket: the policy at connect, bad requests answered on the socket."""

import pytest

from apps.core.consumers import CLOSE_NOT_FOUND
from apps.serving.models import Generation
from tests.projects.test_activity_socket import TIMEOUT_S, headers_for, next_close, run
from workbench.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def playground_socket(project, headers):
    from channels.testing import WebsocketCommunicator

    return WebsocketCommunicator(application, f"/ws/projects/{project.pk}/playground/", headers=headers)


@pytest.mark.parametrize("persona", ["viewer", "annotator", "outsider"])
def test_people_without_model_generate_are_closed_with_4404(request, project, persona):
    headers = headers_for(request.getfixturevalue(persona))

    async def scenario():
        socket = playground_socket(project, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        close, before = await next_close(socket)
        assert close["code"] == CLOSE_NOT_FOUND and before == []
        await socket.disconnect()

    run(scenario)


@pytest.mark.parametrize("request_body, field", [
    ({"model": 999999, "messages": [{"role": "user", "content": "hi"}]}, None),  # not this project's: unknown
    ({"model": "MODEL", "messages": "hi"}, "messages"),
    ({"model": "MODEL", "messages": [{"role": "user", "content": "hi"}], "params": {"temperature": -1}},
     "temperature"),
    ({"model": "MODEL", "messages": [{"role": "user", "content": "hi"}], "params": {"top_k": "many"}}, "top_k"),
    ({"model": "MODEL", "messages": [{"role": "user", "content": "hi"}], "params": {"beam": 4}}, "beam"),
])
def test_a_bad_generate_request_is_answered_with_an_error_naming_the_field(scientist, owner, project, request_body,
                                                                          field):
    from apps.registry.models import RegisteredModel

    model = RegisteredModel.objects.create(project=project, name="Base", format="hf_dir", source_path="/x",
                                           weights_path="/x", status="ready", info={})
    body = {"type": "generate", **{k: (model.pk if v == "MODEL" else v) for k, v in request_body.items()}}
    headers = headers_for(scientist)

    async def scenario():
        socket = playground_socket(project, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        await socket.send_json_to(body)
        reply = await socket.receive_json_from(timeout=TIMEOUT_S)
        assert reply["type"] == "error"
        if field:
            assert reply["field"].startswith(field), reply
        await socket.disconnect()

    run(scenario)
    assert not Generation.objects.exists()


def test_stop_ends_an_answer_early_and_only_its_author_can_stop_it(scientist, admin, project, tiny_model,
                                                                    inference_worker):
    headers, other = headers_for(scientist), headers_for(admin)
    body = {"type": "generate", "model": tiny_model.pk, "messages": [{"role": "user", "content": "what is paris ?"}],
            "params": {"max_new_tokens": 200, "temperature": 1.0, "seed": 3}}

    async def scenario():
        socket = playground_socket(project, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        await socket.send_json_to(body)
        started = await socket.receive_json_from(timeout=60)
        assert started["type"] == "started"
        intruder = playground_socket(project, other)
        assert (await intruder.connect(timeout=TIMEOUT_S))[0]
        await intruder.send_json_to({"type": "cancel", "id": started["id"]})  # not theirs: nothing happens
        await socket.send_json_to({"type": "cancel", "id": started["id"]})
        while (message := await socket.receive_json_from(timeout=60))["type"] != "done":
            assert message["type"] == "delta"
        assert message["result"]["finish_reason"] == "cancelled"
        assert message["result"]["completion_tokens"] < 200
        await intruder.disconnect()
        await socket.disconnect()

    run(scenario)
    generation = Generation.objects.get()
    assert generation.cancel_requested and generation.finish_reason == "cancelled"
