"""Cold start of the start command to a ready /readyz.

Ours: `manage.py up` (embedded Redis, migrations, demo seed, uvicorn, Celery worker) until
/readyz answers 200 — once on an empty data folder, once on the same folder again.
Baseline, same run: plain uvicorn serving the same Django app until /healthz answers, the
floor any Django ASGI deployment pays.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.report import publish, result

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 4.0  # warm start at most 4x the bare web server's start


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _time_until_ok(argv: list[str], path: str, data_dir: Path) -> float:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(WORKBENCH_DATA_DIR=str(data_dir), WORKBENCH_PORT=str(port))
    argv = [a.replace("{port}", str(port)) for a in argv]
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{argv[:4]} exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
                    if response.status == 200:
                        return time.perf_counter() - started
            except OSError:
                time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def run() -> list[dict]:
    python = sys.executable
    up = [python, "manage.py", "up", "--port", "{port}"]
    bare = [python, "-m", "uvicorn", "workbench.asgi:application", "--port", "{port}", "--lifespan", "off"]
    data_dir = Path(tempfile.mkdtemp(prefix="bench-cold-start-"))
    try:
        fresh = _time_until_ok(up, "/readyz", data_dir)
        warm = min(_time_until_ok(up, "/readyz", data_dir) for _ in range(2))
        baseline = min(_time_until_ok(bare, "/healthz", data_dir) for _ in range(2))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    target = f"ratio <= {TARGET_RATIO:g}"
    return publish([
        result(name="cold_start", metric="start command to /readyz 200, existing data folder", unit="s",
               value=warm, baseline_what="bare uvicorn + Django to /healthz 200", baseline_value=baseline,
               target=target, passed=warm / baseline <= TARGET_RATIO,
               extra={"first_run_s": round(fresh, 3)}),
        result(name="cold_start_first_run", metric="start command to /readyz 200, empty data folder (migrations)",
               unit="s", value=fresh, baseline_what="bare uvicorn + Django to /healthz 200",
               baseline_value=baseline, target="reported", passed=True),
    ])


if __name__ == "__main__":
    run()
