"""Open websockets per person and per address are capped across the whole site, through the real
server: the socket over the cap is closed with 4430 and a reason, and a closed one frees its place."""

import json
from contextlib import ExitStack

import pytest
from websockets.exceptions import ConnectionClosed

from apps.core import connections
from tests.conftest import wait_for
from tests.core.test_websocket_origin import open_activity_socket

pytestmark = pytest.mark.timeout(60)

CLOSE_TOO_MANY_SOCKETS = 4430


def pong(socket) -> bool:
    socket.send(json.dumps({"type": "ping"}))
    return json.loads(socket.recv(timeout=10)) == {"type": "pong"}


def refused_with(socket) -> tuple[int, str]:
    with pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=10)
    return closed.value.rcvd.code, closed.value.rcvd.reason


@pytest.mark.smoke
def test_a_person_over_the_socket_cap_is_refused_until_one_of_theirs_closes(live_asgi, viewer, project, settings):
    settings.WEBSOCKETS_PER_USER = 3
    with ExitStack() as stack:
        def socket():
            return stack.enter_context(open_activity_socket(live_asgi, project, viewer, origin=live_asgi))

        first, *others = [socket() for _ in range(3)]
        assert all(pong(s) for s in (first, *others))
        assert refused_with(socket()) == (CLOSE_TOO_MANY_SOCKETS, "Too many open connections for this account.")
        first.close()
        # The server counts the close a moment after close() returns here.
        wait_for(lambda: connections._client().zcard(connections._keys(viewer.pk, None)[0][0]) == 2, timeout=10,
                 what="the closed socket to be uncounted")
        assert pong(socket())


def test_one_address_over_its_cap_is_refused_whoever_asks(live_asgi, viewer, annotator, project, settings):
    settings.WEBSOCKETS_PER_USER, settings.WEBSOCKETS_PER_ADDRESS = 10, 3
    with ExitStack() as stack:
        def socket(user):
            return stack.enter_context(open_activity_socket(live_asgi, project, user, origin=live_asgi))

        held = [socket(viewer), socket(viewer), socket(annotator)]
        assert all(pong(s) for s in held)
        assert refused_with(socket(annotator)) == (CLOSE_TOO_MANY_SOCKETS,
                                                   "Too many open connections for this address.")
