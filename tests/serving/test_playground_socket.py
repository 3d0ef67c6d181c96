"""The playground websocket: the policy at connect, bad requests answered on the socket."""

import pytest
from asgiref.sync import sync_to_async

from apps.projects.sockets import CLOSE_NOT_FOUND
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


def test_a_stopped_generation_ends_as_cancelled_without_tokens(scientist, project, tiny_model, inference_worker):
    """The worker honours the flag: a generation stopped before it ran ends at once."""
    from django.db import transaction

    from apps.serving import services
    from tests.conftest import wait_for

    generation = services.generation_create(user=scientist, project=project, model_ref=tiny_model.pk,
                                            source=Generation.Source.PLAYGROUND, prompt="what is paris ?",
                                            params={"max_new_tokens": 200})
    assert services.generation_cancel(user=scientist, project=project, generation_id=generation.pk)
    with transaction.atomic():
        services.generation_enqueue(generation.pk)
    done = wait_for(lambda: (g := Generation.objects.get(pk=generation.pk)).state == "succeeded" and g, timeout=60,
                    what="the stopped generation")
    assert (done.finish_reason, done.completion_tokens, done.output) == ("cancelled", 0, "")


STORY = {"type": "generate", "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
         "params": {"max_new_tokens": 300, "temperature": 0}}


def test_only_its_author_can_stop_a_generation_and_it_stops_at_once(scientist, admin, project, demo_model,
                                                                      inference_worker):
    headers, other = headers_for(scientist), headers_for(admin)

    async def scenario():
        socket = playground_socket(project, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        await socket.send_json_to({**STORY, "model": demo_model.pk})
        started = await socket.receive_json_from(timeout=60)
        assert started["type"] == "started"
        first = await socket.receive_json_from(timeout=120)  # the model is loaded and streaming
        assert first["type"] == "delta"
        intruder = playground_socket(project, other)
        assert (await intruder.connect(timeout=TIMEOUT_S))[0]
        await intruder.send_json_to({"type": "cancel", "id": started["id"]})  # not theirs: nothing happens
        assert await intruder.receive_nothing(timeout=0.3)
        assert not await sync_to_async(lambda: Generation.objects.get().cancel_requested)()
        await socket.send_json_to({"type": "cancel", "id": started["id"]})
        while (message := await socket.receive_json_from(timeout=60))["type"] != "done":
            assert message["type"] == "delta"
        assert message["result"]["finish_reason"] == "cancelled"
        assert message["result"]["completion_tokens"] < 300
        await intruder.disconnect()
        await socket.disconnect()

    run(scenario)
    assert Generation.objects.get().cancel_requested


@pytest.mark.timeout(60)
def test_the_playground_is_held_to_its_projects_serving_limits(scientist, project):
    from apps.registry.models import RegisteredModel
    from apps.serving import limits

    model = RegisteredModel.objects.create(project=project, name="Base", format="hf_dir", source_path="/x",
                                           weights_path="/x", status="ready", info={})
    project.serving_max_concurrent_per_project, project.serving_tokens_per_minute_per_project = 1, 100
    project.save()
    elsewhere = limits.acquire(project, None, slots=1, reserve=1)  # a /v1 answer of the project, running
    headers = headers_for(scientist)
    ask = {"type": "generate", "model": model.pk, "messages": [{"role": "user", "content": "hi"}]}

    replies = []

    def refused(body: dict) -> dict:
        async def scenario():
            socket = playground_socket(project, headers)
            assert (await socket.connect(timeout=TIMEOUT_S))[0]
            await socket.send_json_to(body)
            replies.append(await socket.receive_json_from(timeout=TIMEOUT_S))
            await socket.disconnect()

        run(scenario)
        return replies[-1]

    busy = refused({**ask, "params": {"max_new_tokens": 8}})
    assert busy["type"] == "error" and busy["field"] == "serving_max_concurrent_per_project"
    assert "1 generations running at once for this project" in busy["detail"]
    limits.release(elsewhere, 0)
    too_many = refused({**ask, "params": {"max_new_tokens": 101}})
    assert too_many["field"] == "serving_tokens_per_minute_per_project" and "alone" in too_many["detail"]
    assert not Generation.objects.exists()
