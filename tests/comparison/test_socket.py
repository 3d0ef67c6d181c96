"""The comparison websocket (ws/comparisons/<id>/) through the real ASGI application and the
Redis channel layer: state, the stored cells, then live cells; the policy at connect."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from apps.comparison import events, selectors
from apps.projects.sockets import CLOSE_NOT_FOUND
from tests.comparison.factories import make_comparison
from tests.projects.test_activity_socket import TIMEOUT_S, headers_for, next_close, run
from workbench.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def socket_for(comparison, headers) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/comparisons/{comparison.pk}/", headers=headers)


async def read_until_live(socket) -> tuple[dict, list[dict]]:
    state, cells = None, []
    while True:
        message = await socket.receive_json_from(timeout=TIMEOUT_S)
        if message["type"] == "state":
            state = message["comparison"]
        elif message["type"] == "cells":
            cells.extend(message["cells"])
        elif message["type"] == "summaries":  # the server's, after the backlog's cells
            assert [s["cells"] for s in message["summaries"]] == [len(cells) // 2] * 2
        elif message["type"] == "live":
            return state, cells


def test_a_viewer_gets_the_state_then_the_stored_cells_then_live_ones(viewer, project, owner):
    comparison = make_comparison(project, owner, state="running")
    new_cell = {"prompt": 1, "contestant": 2, "text": "<b>live</b>", "error": "", "scores": {}}
    headers = headers_for(viewer)

    async def scenario():
        socket = socket_for(comparison, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        state, cells = await read_until_live(socket)
        assert state["state"] == "running" and state["cells_done"] == 6
        assert len(cells) == 6 and cells[0]["text"].endswith("says 0")
        summaries = await sync_to_async(selectors.model_summaries)(comparison)
        await sync_to_async(events.cells)(comparison.pk, [new_cell], summaries)
        assert await socket.receive_json_from(timeout=TIMEOUT_S) == {"type": "cells", "cells": [new_cell]}
        assert await socket.receive_json_from(timeout=TIMEOUT_S) == {"type": "summaries", "summaries": summaries}
        await sync_to_async(events.comparison_state)(comparison)
        assert (await socket.receive_json_from(timeout=TIMEOUT_S))["type"] == "state"
        await socket.disconnect()

    run(scenario)
    assert selectors.grid_cells(comparison)[0]["text"].endswith("says 0")


@pytest.mark.parametrize("persona", ["annotator", "outsider"])
def test_people_who_may_not_view_the_comparison_are_closed_with_4404(request, project, owner, persona):
    comparison = make_comparison(project, owner)
    headers = headers_for(request.getfixturevalue(persona))

    async def scenario():
        socket = socket_for(comparison, headers)
        connected, _ = await socket.connect(timeout=TIMEOUT_S)
        assert connected
        close, before = await next_close(socket)
        assert close["code"] == CLOSE_NOT_FOUND and before == []

    run(scenario)
