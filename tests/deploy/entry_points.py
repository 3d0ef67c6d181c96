"""What the deploy files must agree with: the product's own entry points, queues and settings.

Shared by the Dockerfile, compose and Kubernetes tests, which read the files as data (nothing is
built or started)."""

import re
from pathlib import Path
from types import SimpleNamespace

from celery.bin.beat import beat as celery_beat
from celery.bin.worker import worker as celery_worker

from apps.monitoring.broker import configured_queues
from workbench.celery import app as celery_app
from workbench.server import uvicorn_argv

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

# Read by libraries, not by workbench/settings.py: boto3 takes the bucket's credentials from the
# environment (README: "never from settings"); transformers/huggingface_hub keep their caches
# under HF_HOME.
THIRD_PARTY_VARIABLES = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REQUEST_CHECKSUM_CALCULATION", "HF_HOME"}
_ENV_READ = re.compile(r"""(?:env_(?:str|bool|int|float|list)\(|os\.environ\.get\(|os\.getenv\(|os\.environ\[)\s*["']([A-Z0-9_]+)["']""")


def variables_the_code_reads() -> set[str]:
    """Every environment variable named in the product's code (settings and the few direct reads)."""
    names = set()
    for package in ("workbench", "apps", "workers"):
        for path in (REPO / package).rglob("*.py"):
            names.update(_ENV_READ.findall(path.read_text()))
    return names


def known_variables() -> set[str]:
    return variables_the_code_reads() | THIRD_PARTY_VARIABLES


def production_uvicorn_command() -> list[str]:
    """The web command every container runs: `manage.py up`'s argv, one process per container."""
    return ["python", *uvicorn_argv(host="0.0.0.0", port=8000, workers=1)]


def check_celery_command(command: list[str]) -> dict:
    """Parse a container's Celery command with Celery's own option parser (an unknown or misspelt
    option fails here) and return the parsed options, with `subcommand` and `queues` (a list)."""
    assert command[:5] == ["python", "-m", "celery", "-A", "workbench"], command
    subcommand, args = command[5], command[6:]
    parser = {"worker": celery_worker, "beat": celery_beat}[subcommand]
    params = dict(parser.make_context(subcommand, list(args), obj=SimpleNamespace(app=celery_app)).params)
    params["subcommand"] = subcommand
    if subcommand == "worker":
        queues = params.get("queues") or []
        queues = [q for item in queues for q in item.split(",")] if queues else []
        assert queues, f"a worker must name its queues with -Q: {command}"
        unknown = set(queues) - set(configured_queues())
        assert not unknown, f"queues {unknown} are not in workbench/celery.py's task_queues"
        params["queues"] = queues
        # --hostname <queue>@%h: the health checks ping the worker by that name.
        assert params.get("hostname", "").startswith(f"{queues[0]}@"), command
    return params


def worker_ping_names(probe: str) -> list[str]:
    """The worker names a health check's `celery inspect ping --destination NAME@...` asks for."""
    return re.findall(r"--destination \\?\"?([a-z]+)@", probe)
