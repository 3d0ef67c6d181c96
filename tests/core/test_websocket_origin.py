"""The websocket Origin check through the real server (uvicorn with the shipped options), with a
logged-in session: only the site's own origin, compared in full (scheme, host, port), may open a
socket, as CSRF compares a form's Origin."""

import json

import pytest
from django.test import Client
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

pytestmark = pytest.mark.timeout(60)


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def open_activity_socket(live_asgi, project, user, origin):
    url = live_asgi.replace("http://", "ws://") + f"/ws/projects/{project.pk}/activity/"
    return connect(url, origin=origin, additional_headers={"Cookie": session_cookie(user)}, open_timeout=10)


@pytest.mark.smoke
def test_the_sites_own_origin_opens_a_socket(live_asgi, viewer, project):
    with open_activity_socket(live_asgi, project, viewer, origin=live_asgi) as socket:
        socket.send(json.dumps({"type": "ping"}))
        assert json.loads(socket.recv(timeout=10)) == {"type": "pong"}


@pytest.mark.parametrize("foreign", ["http://127.0.0.1:9999", "https://127.0.0.1:{port}", "http://localhost:{port}",
                                     "http://localhost:3000", "https://localhost", "http://evil.example",
                                     "null", "http://127.0.0.1:{port}/path", None],
                         ids=["other-port", "other-scheme", "other-host-same-port", "dev-server", "https-localhost",
                              "foreign-site", "null", "not-an-origin", "missing"])
def test_any_other_origin_is_refused_even_with_a_valid_session(live_asgi, viewer, project, foreign):
    origin = foreign.format(port=live_asgi.rsplit(":", 1)[1]) if foreign else None
    with pytest.raises(InvalidStatus) as refused:
        open_activity_socket(live_asgi, project, viewer, origin=origin)
    assert refused.value.response.status_code == 403
