"""Start the whole workbench: embedded Redis, migrations, demo data, web server, worker.

Every child runs in its own session so the terminal's Ctrl-C reaches only this process,
which then stops the children in order (web and worker first, Redis last) and waits for
them. Children are also told by the kernel to stop if this process dies (PR_SET_PDEATHSIG),
so no orphan is left even after a kill -9.
"""

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from django.conf import settings
from django.core.management import BaseCommand, call_command

from workbench.embedded import EmbeddedRedis
from workbench.server import uvicorn_argv

PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 15
READY_TIMEOUT_S = 120


def _child_setup() -> None:
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: Ctrl-C handling below still stops the children


class Command(BaseCommand):
    help = "Start the workbench (web server, Celery worker, embedded Redis) and stop it on Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("WORKBENCH_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("WORKBENCH_PORT", "8000")))
        parser.add_argument("--no-worker", action="store_true", help="web server only")

    def handle(self, *args, host, port, no_worker, **options):
        self.children: list[tuple[str, subprocess.Popen]] = []
        self.redis: EmbeddedRedis | None = None
        self.stopping = False
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        started = time.monotonic()
        try:
            if settings.EMBEDDED_REDIS:
                self.redis = EmbeddedRedis(settings.DATA_DIR)
                self.redis.start(preexec_fn=_child_setup)
                self.stdout.write(f"embedded Redis on {self.redis.socket}")
            call_command("migrate", interactive=False, verbosity=0)
            call_command("seed_demo")
            python = sys.executable
            web_env = None
            if settings.WEB_WORKERS > 1:  # their request metrics are merged from files (http_metrics)
                metrics_dir = settings.DATA_DIR / "prometheus"
                shutil.rmtree(metrics_dir, ignore_errors=True)  # a previous run's processes are gone
                metrics_dir.mkdir(parents=True)
                web_env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
            self._spawn("web", [python, *uvicorn_argv(host=host, port=port, workers=settings.WEB_WORKERS)],
                        env=web_env)
            if not no_worker:
                # Imports, exports, splits and the rest: a worker of their own, so a running
                # fine-tune never takes the slot they wait for.
                self._spawn("worker", [python, "-m", "celery", "-A", "workbench", "--quiet", "worker",
                                       "-Q", "default", "--concurrency", "2",
                                       "--hostname", f"workbench-{port}@%h", "--loglevel", "WARNING",
                                       # Embedded beat: the periodic reaper of jobs whose worker vanished.
                                       "--beat", "--schedule", str(settings.DATA_DIR / "celerybeat-schedule")])
                # Fine-tunes, one at a time (the next waits in the queue), as on a one-GPU machine.
                self._spawn("trainer", [python, "-m", "celery", "-A", "workbench", "--quiet", "worker",
                                        "-Q", "gpu", "--concurrency", "1",
                                        "--hostname", f"workbench-gpu-{port}@%h", "--loglevel", "WARNING"])
                # Generation: threads of one process share its model cache and batch together. A thread
                # waits on each running request, so the threads bound the batch: 16, as compose and
                # Kubernetes run it (with 8, 16 clients were served in two waves: bench/README.md).
                self._spawn("inference", [python, "-m", "celery", "-A", "workbench", "--quiet", "worker",
                                          "-Q", "inference", "--pool", "threads", "--concurrency", "16",
                                          "--hostname", f"workbench-inference-{port}@%h", "--loglevel", "WARNING"])
            base_url = f"http://{host}:{port}"
            self._wait_ready(base_url)
            self.stdout.write(self.style.SUCCESS(
                f"Workbench is ready at {base_url} (started in {time.monotonic() - started:.1f}s). "
                "Press Ctrl-C to stop."))
            self._supervise()
        finally:
            self._stop_all()

    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> None:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=_child_setup, env=env)
        self.children.append((name, process))

    def _on_signal(self, signum, frame) -> None:
        if not self.stopping:
            self.stopping = True
            self.stdout.write("\nstopping the workbench ...")

    def _wait_ready(self, base_url: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer yet"
        while time.monotonic() < deadline and not self.stopping:
            self._check_children()
            try:
                with urllib.request.urlopen(f"{base_url}/readyz", timeout=3) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = json.loads(exc.read() or b"{}").get("checks", exc.code)
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        if not self.stopping:
            raise SystemExit(f"the workbench did not become ready in {READY_TIMEOUT_S}s: {last}")

    def _check_children(self) -> None:
        for name, process in self.children:
            if process.poll() is not None and not self.stopping:
                raise SystemExit(f"the {name} process exited with code {process.returncode}")

    def _supervise(self) -> None:
        while not self.stopping:
            self._check_children()
            time.sleep(0.5)

    def _stop_all(self) -> None:
        self.stopping = True
        for _, process in reversed(self.children):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for name, process in reversed(self.children):
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop in {STOP_TIMEOUT_S}s; killing it")
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self.redis:
            self.redis.stop()
        self.stdout.write("workbench stopped")
