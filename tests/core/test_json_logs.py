"""LOG_FORMAT=json: the real web server's output (uvicorn's access log and the application's own
loggers) is one JSON object per line, tracebacks inside their record, hostile text kept as data."""

import json
import signal
import subprocess
import sys

import pytest
import requests

from tests.conftest import child_process_env, die_with_the_test_run, free_port, wait_for
from workbench.server import uvicorn_argv

pytestmark = [pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]


def _up(base: str) -> bool:
    try:
        return requests.get(f"{base}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_the_web_server_logs_one_json_object_per_line(redis_service):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, *uvicorn_argv(host="127.0.0.1", port=port, workers=1, log_level="info")],
                              env={**child_process_env(), "LOG_FORMAT": "json"}, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=die_with_the_test_run)
    try:
        wait_for(lambda: server.poll() is not None or _up(base), timeout=60, what="the server")
        hostile = '/no-such-page/"}<script>\nfake'
        assert requests.get(base + hostile, timeout=10).status_code == 404
        # A request with a bad Host header makes Django log a warning of its own (django.security).
        assert requests.get(f"{base}/healthz", headers={"Host": "evil.example"}, timeout=10).status_code == 400
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=30)
    lines = [line for line in output.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line parses: no plain-text line slipped through
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    loggers = {r["logger"] for r in records}
    assert "uvicorn.access" in loggers and "uvicorn.error" in loggers, loggers
    assert any(r["logger"].startswith("django.security") and r["level"] == "ERROR" for r in records), records
    access = [r["message"] for r in records if r["logger"] == "uvicorn.access"]
    assert any("/no-such-page/" in message and "404" in message for message in access), access


def test_a_traceback_and_the_extra_fields_stay_inside_one_record():
    import logging

    from workbench.logs import JsonFormatter

    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        record = logging.getLogger("apps.demo").makeRecord("apps.demo", logging.ERROR, __file__, 1, "job %s failed",
                                                           (7,), sys.exc_info(), extra={"job_id": 7})
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "job 7 failed" and entry["job_id"] == 7 and entry["level"] == "ERROR"
    assert entry["exception"].startswith("Traceback") and "ValueError: bad\nvalue" in entry["exception"]
