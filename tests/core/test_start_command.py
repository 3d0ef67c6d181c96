"""The README's start command, run for real: embedded Redis, web server, worker."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.conftest import die_with_the_test_run, free_port

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120


def wait_ready(base_url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"start command exited early with {process.returncode}"
        try:
            if requests.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                return
        except (requests.ConnectionError, requests.Timeout):
            pass  # not listening yet, or too busy starting to answer in time: not ready yet
        time.sleep(0.3)
    pytest.fail("the workbench did not become ready")


def wait_worker(data_dir: Path, timeout: float = 60) -> list:
    """Ping the Celery worker through the embedded broker, as an operator would."""
    broker = f"redis+socket://{data_dir}/redis.sock"
    code = ("import sys; from celery import Celery; "
            f"print(Celery(broker={broker!r}).control.ping(timeout=2))")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = subprocess.run([str(ROOT / ".venv/bin/python"), "-c", code], capture_output=True, text=True,
                                timeout=30)
        if "pong" in result.stdout:
            return result.stdout
        time.sleep(1)
    pytest.fail("no Celery worker answered a ping")


def worker_queues(data_dir: Path) -> dict[str, list[str]]:
    """Each worker's queues, asked through the embedded broker."""
    broker = f"redis+socket://{data_dir}/redis.sock"
    code = ("import json; from celery import Celery; "
            f"replies = Celery(broker={broker!r}).control.inspect(timeout=3).active_queues() or {{}}; "
            "print(json.dumps({name: sorted(q['name'] for q in queues) for name, queues in replies.items()}))")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = subprocess.run([str(ROOT / ".venv/bin/python"), "-c", code], capture_output=True, text=True,
                                timeout=30)
        replies = json.loads(result.stdout or "{}")
        if len(replies) >= 3:
            return replies
        time.sleep(1)
    pytest.fail(f"not every worker answered: {result.stdout} {result.stderr}")


@pytest.mark.smoke
@pytest.mark.slow
def test_start_command_serves_logs_in_and_stops_cleanly_on_ctrl_c(tmp_path):
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}}
    env.update(WORKBENCH_DATA_DIR=str(tmp_path), WORKBENCH_PORT=str(port))
    process = subprocess.Popen([str(ROOT / "run.sh"), "start"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, preexec_fn=die_with_the_test_run)
    try:
        wait_ready(base_url, process)
        assert "pong" in wait_worker(tmp_path)
        queues = worker_queues(tmp_path)
        # Training never takes default's slots; its worker also takes the jobs its devices fit (gpu.devices-N).
        from apps.training.capacity import job_queue, worker_devices

        training = sorted(job_queue(n) for n in range(1, worker_devices() + 1))
        assert sorted(sorted(q) for q in queues.values()) == sorted([["default"], training, ["inference"]]), queues
        descendants = psutil.Process(process.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in descendants)
        assert "redis-server" in names and "uvicorn" in names and "celery" in names

        password = (tmp_path / "demo-admin-password").read_text().strip()
        session = requests.Session()
        login_page = session.get(f"{base_url}/accounts/login/", timeout=10)
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text).group(1)
        answer = session.post(f"{base_url}/accounts/login/", timeout=10,
                              data={"username": "admin", "password": password, "csrfmiddlewaretoken": csrf},
                              headers={"Referer": f"{base_url}/accounts/login/"})
        assert answer.url == f"{base_url}/projects/"
        assert "Demo project" in answer.text

        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, output
    assert "web did not stop" not in output, output  # nothing outlived its connection (a leaked receiver did)
    assert "Log in as 'admin'" in output
    assert "workbench stopped" in output
    gone, alive = psutil.wait_procs(descendants, timeout=10)
    assert not alive, f"orphans left behind: {alive}"
    assert not (tmp_path / "redis.sock").exists()


@pytest.mark.slow
def test_start_command_is_idempotent_and_keeps_the_data(tmp_path):
    """Running it twice on one data folder: same admin password, one demo project."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(WORKBENCH_DATA_DIR=str(tmp_path))
    python = str(ROOT / ".venv/bin/python")
    outputs = []
    for _ in range(2):
        for step in (["migrate", "--noinput", "-v0"], ["seed_demo"]):
            result = subprocess.run([python, "manage.py", *step], cwd=ROOT, env=env, capture_output=True,
                                    text=True, timeout=120)
            assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
    count = subprocess.run([python, "manage.py", "shell", "--no-imports", "-c",
                            "from apps.projects.models import Project; print(Project.objects.count())"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert count.stdout.strip() == "1"
