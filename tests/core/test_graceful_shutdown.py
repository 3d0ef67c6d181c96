"""SIGTERM to the real server (uvicorn with the shipped flags, as a container stop or a rolling
update sends it): live pages are told to reconnect elsewhere (close code 1012), nothing new is
accepted, and the process is gone well within a pod's grace period, ended by the signal (not a crash)."""

import json
import signal
import subprocess
import sys
import time

import pytest
import requests
from websockets.exceptions import ConnectionClosed

from tests.conftest import child_process_env, die_with_the_test_run, free_port, wait_for
from tests.core.test_websocket_origin import open_activity_socket
from workbench.server import UVICORN_OPTIONS, uvicorn_argv

pytestmark = [pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]


def _healthy(base: str) -> bool:
    try:
        return requests.get(f"{base}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_sigterm_closes_live_pages_with_1012_and_the_server_exits_within_its_grace(redis_service, viewer, project):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, *uvicorn_argv(host="127.0.0.1", port=port, workers=1)],
                              env=child_process_env(), stdin=subprocess.DEVNULL, preexec_fn=die_with_the_test_run)
    try:
        wait_for(lambda: server.poll() is not None or _healthy(base), timeout=60, what="the server")
        assert server.poll() is None, f"the server exited with {server.returncode}"
        idle = requests.Session()  # a load balancer's kept-alive connection
        assert idle.get(f"{base}/healthz", timeout=5).status_code == 200
        with open_activity_socket(base, project, viewer, origin=base) as socket:
            socket.send(json.dumps({"type": "ping"}))
            assert json.loads(socket.recv(timeout=10)) == {"type": "pong"}
            stopped_at = time.monotonic()
            server.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012  # "service restart": reconnect
        # uvicorn re-raises the signal once it has shut down, so the status says SIGTERM ended it (not a crash).
        assert server.wait(timeout=UVICORN_OPTIONS["timeout_graceful_shutdown"] + 5) == -signal.SIGTERM
        assert time.monotonic() - stopped_at < UVICORN_OPTIONS["timeout_graceful_shutdown"]
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{base}/healthz", timeout=5)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
