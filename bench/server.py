"""The production web server for benchmarks: uvicorn exactly as `manage.py up` starts it
(`workbench.server.uvicorn_argv`), in its own process group so that it stops as a whole."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from bench.import_jsonl import ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(env: dict, *, workers: int = 1) -> tuple[subprocess.Popen, str]:
    """Start the server with `env`; returns (process, "http://127.0.0.1:port") once /healthz is 200."""
    import requests

    from workbench.server import uvicorn_argv

    port = free_port()
    process = subprocess.Popen([sys.executable, *uvicorn_argv(host="127.0.0.1", port=port, workers=workers)],
                               cwd=ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}")
            try:
                if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                    return process, base
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError("the server did not answer /healthz within 60 s")
    except BaseException:  # Ctrl-C while it starts too: the caller has no process to stop yet
        stop_web(process)
        raise


def stop_web(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its workers too), SIGKILL if it is still there after 15 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(15)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            pass
