"""deploy/compose.yaml: valid Compose, and every Workbench service starts a real entry point of
the product with variables the product reads."""

import json
import re
from importlib import resources

import jsonschema
import pytest
import yaml

from tests.deploy.entry_points import (
    DEPLOY,
    check_celery_command,
    known_variables,
    production_uvicorn_command,
    worker_ping_names,
)
from workbench.celery import app as celery_app

pytestmark = pytest.mark.timeout(60)

COMPOSE = DEPLOY / "compose.yaml"
REQUIRED = {"web", "worker", "beat", "inference", "gpu-worker", "postgres", "redis", "minio"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def workbench_services(compose: dict) -> dict:
    return {name: s for name, s in compose["services"].items() if str(s.get("image", "")).startswith("workbench:")}


def test_valid_against_the_compose_specification(compose):
    # The compose-spec JSON schema as check-jsonschema vendors it: no network.
    schema = json.loads(resources.files("check_jsonschema.builtin_schemas.vendor").joinpath(
        "compose-spec.json").read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_every_part_of_the_stack_is_there(compose):
    assert REQUIRED <= set(compose["services"])
    for volume in (v.split(":")[0] for s in compose["services"].values() for v in s.get("volumes", [])):
        assert volume in compose["volumes"], f"volume {volume} is not declared"


def test_commands_are_the_products_entry_points(compose):
    consumed = set()
    beats = 0
    for name, service in workbench_services(compose).items():
        command = service["command"]
        if "uvicorn" in command:
            assert command == production_uvicorn_command(), name
        elif command[:2] == ["python", "manage.py"]:
            assert command[2] == "migrate", name
        else:
            params = check_celery_command(command)
            beats += params["subcommand"] == "beat"
            if params["subcommand"] == "worker":
                consumed.update(params["queues"])
                probe = " ".join(service["healthcheck"]["test"])
                assert worker_ping_names(probe) == [params["queues"][0]], f"{name}'s health check pings another worker"
    assert beats == 1, "exactly one beat"
    assert consumed == {q.name for q in celery_app.conf.task_queues}, "a queue without a worker"


def test_gpu_worker_reserves_a_gpu_and_trains_one_job_at_a_time(compose):
    service = compose["services"]["gpu-worker"]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in d["capabilities"] for d in devices)
    params = check_celery_command(service["command"])
    assert params["queues"] == ["gpu"] and params["concurrency"] == 1
    assert service["build"]["target"] == "gpu"
    assert check_celery_command(compose["services"]["inference"]["command"])["pool"].__module__.endswith("thread")


def test_environment_holds_only_variables_the_product_reads(compose):
    known = known_variables()
    for name, service in workbench_services(compose).items():
        unknown = set(service["environment"]) - known
        assert not unknown, f"{name} sets {unknown}, which nothing reads"


def test_health_checks_on_every_long_running_service(compose):
    # beat holds no port and answers no ping; the one-shot services exit.
    exempt = {"beat", "migrate", "minio-bucket"}
    for name, service in compose["services"].items():
        if name not in exempt:
            assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"


def test_env_example_names_every_required_variable():
    text = COMPOSE.read_text()
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", text))
    example = dict(line.split("=", 1) for line in (DEPLOY / ".env.example").read_text().splitlines()
                   if line and not line.startswith("#"))
    assert required <= set(example), f"deploy/.env.example lacks {required - set(example)}"
    interpolated = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    assert set(example) - {"COMPOSE_PROFILES"} <= interpolated, "deploy/.env.example sets a variable compose ignores"
