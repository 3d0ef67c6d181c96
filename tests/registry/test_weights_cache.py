"""The bounded weights cache (issue #22): models fetched from the artifact bucket (a real moto S3 server
process) into ARTIFACT_ROOT/weights-cache keep under WEIGHTS_CACHE_MAX_BYTES, the least recently used
evicted first, never one used in the last minutes; a model larger than the limit is refused naming it."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps.core import storage
from apps.registry import weights
from apps.registry.models import RegisteredModel
from apps.registry.weights import WeightsUnavailable, local_weights
from tests.conftest import child_process_env, die_with_the_test_run
from tests.core.test_storage_s3 import s3, s3_endpoint  # noqa: F401  (fixtures)

SIZE = 1000  # each model's one weights file; the limits below count in these


def in_bucket(tmp_path: Path, name: str, size: int = SIZE) -> RegisteredModel:
    """A merged model written on another machine: in the bucket under models/<name>/, not here."""
    folder = tmp_path / f"machine-a-{name}"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(os.urandom(size))
    storage.put_folder(folder, f"models/{name}/")
    shutil.rmtree(folder)
    return RegisteredModel(name=name, kind="base", weights_path=str(folder), bucket_prefix=f"models/{name}/")


def cache(settings) -> Path:
    return Path(settings.ARTIFACT_ROOT) / "weights-cache"


def cached(settings) -> list[str]:
    """The models whose folders are in the cache, complete."""
    root = cache(settings) / "models"
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


def cached_bytes(settings) -> int:
    return sum(p.stat().st_size for p in (cache(settings) / "models").rglob("*") if p.is_file())


def used_ago(name: str, seconds: float) -> None:
    """Back-date the model's last use (its index entry), as if `seconds` had passed since."""
    moment = time.time() - seconds
    os.utime(weights._index_entry(f"models/{name}"), (moment, moment))


@pytest.mark.timeout(120)
def test_the_least_recently_used_folders_go_first_and_the_total_keeps_under_the_limit(s3, settings,  # noqa: F811
                                                                                       tmp_path):
    settings.WEIGHTS_CACHE_MAX_BYTES = 3500
    models = {name: in_bucket(tmp_path, name) for name in "abcde"}
    for name in "abc":
        local_weights(models[name])
    used_ago("a", 3 * 3600)
    used_ago("b", 2 * 3600)
    used_ago("c", 3600)
    local_weights(models["d"])  # 4,000 bytes: the least recently used goes
    assert cached(settings) == ["b", "c", "d"] and cached_bytes(settings) <= 3500
    local_weights(models["b"])  # a cache hit: b is used now, c is the least recently used
    used_ago("d", 1800)
    local_weights(models["e"])
    assert cached(settings) == ["b", "d", "e"] and cached_bytes(settings) <= 3500
    # The evicted folders went whole, their index entries with them; what was evicted comes back on demand.
    assert sorted(p.name for p in (cache(settings) / "models").iterdir()) == ["b", "d", "e"]
    assert len(list((cache(settings) / ".index").glob("*.json"))) == 3
    used_ago("b", 60 * 60)
    assert (local_weights(models["a"]) / "model.safetensors").stat().st_size == SIZE
    assert cached(settings) == ["a", "d", "e"]


@pytest.mark.timeout(120)
def test_a_folder_used_in_the_last_minutes_is_never_evicted_the_cache_going_over_instead(s3, settings,  # noqa: F811
                                                                                         tmp_path):
    settings.WEIGHTS_CACHE_MAX_BYTES = 1500
    first, second, third = (in_bucket(tmp_path, name) for name in ("first", "second", "third"))
    local_weights(first)
    used_ago("first", weights.RECENT_USE_S - 60)  # a load may still be opening its files
    local_weights(second)
    assert cached(settings) == ["first", "second"]  # over the limit rather than pull it from under that load
    used_ago("first", weights.RECENT_USE_S + 60)
    used_ago("second", weights.RECENT_USE_S + 120)  # the older of the two
    local_weights(first)  # a cache hit makes it recent again: the other goes
    local_weights(third)
    assert cached(settings) == ["first", "third"]
    # The folder just fetched is never the one evicted, however old the others' uses look.
    used_ago("first", 10 * 3600)
    path = local_weights(second)
    assert cached(settings) == ["second", "third"]  # third was fetched minutes ago: in use still
    assert (path / "model.safetensors").stat().st_size == SIZE


@pytest.mark.timeout(120)
def test_a_model_larger_than_the_limit_is_refused_naming_it_and_the_setting(s3, settings, tmp_path):  # noqa: F811
    settings.WEIGHTS_CACHE_MAX_BYTES = 999
    big = in_bucket(tmp_path, "big")
    with pytest.raises(WeightsUnavailable) as refused:
        local_weights(big)
    assert refused.value.message == (
        "The weights of “big” (1,000 bytes) are larger than this machine's weights cache may hold "
        "(WEIGHTS_CACHE_MAX_BYTES = 999 bytes): raise it, or set it to 0 for no limit.")
    assert refused.value.status == 409 and refused.value.field == "model"
    assert not [p for p in cache(settings).rglob("*") if p.is_file() and p.name != ".lock"]  # nothing downloaded
    # 0: unbounded; nothing is evicted, however old.
    settings.WEIGHTS_CACHE_MAX_BYTES = 0
    others = [in_bucket(tmp_path, name, size=50_000) for name in ("x", "y")]
    local_weights(big)
    used_ago("big", 10 * 3600)
    for other in others:
        local_weights(other)
    assert cached(settings) == ["big", "x", "y"]


@pytest.mark.timeout(120)
def test_stale_downloads_and_evicted_leftovers_are_removed_at_the_next_fetch(s3, settings, tmp_path):  # noqa: F811
    settings.WEIGHTS_CACHE_MAX_BYTES = 10_000
    models = cache(settings) / "models"
    stale, fresh, evicted = (models / ".gone-download-k3j2", models / ".live-download-q8x1",
                             models / ".old-evicted-5f5f")
    for folder in (stale, fresh, evicted):
        (folder / "nested").mkdir(parents=True)
        (folder / "nested" / "model.safetensors").write_bytes(b"partial")
    hours_ago = time.time() - 2 * 3600
    for path in (stale, stale / "nested", stale / "nested" / "model.safetensors", fresh, fresh / "nested"):
        os.utime(path, (hours_ago, hours_ago))  # `fresh`'s file is still being written: its folder is live
    local_weights(in_bucket(tmp_path, "new"))
    assert sorted(p.name for p in models.iterdir()) == [".live-download-q8x1", "new"]
    assert (fresh / "nested" / "model.safetensors").read_bytes() == b"partial"


@pytest.mark.timeout(120)
def test_a_cache_emptied_by_hand_fetches_again_and_forgets_what_went(s3, settings, tmp_path):  # noqa: F811
    settings.WEIGHTS_CACHE_MAX_BYTES = 2500
    one, two, three = (in_bucket(tmp_path, name) for name in ("one", "two", "three"))
    local_weights(one)
    local_weights(two)
    shutil.rmtree(cache(settings) / "models" / "one")  # an operator freeing the disk
    used_ago("one", 3600)
    used_ago("two", 3600)
    assert (local_weights(one) / "model.safetensors").stat().st_size == SIZE  # fetched again
    local_weights(three)
    assert cached(settings) == ["one", "three"]
    assert len(list((cache(settings) / ".index").glob("*.json"))) == 2


CHILD = """
import hashlib, json, sys
import django
django.setup()
from apps.registry import weights
from apps.registry.models import RegisteredModel

weights.RECENT_USE_S = 0  # every folder but the one just fetched may go: the most evictions a run can see
names, expected = json.loads(sys.argv[1]), json.loads(sys.argv[2])
read = missing = 0
for _ in range(3):
    for name in names:
        path = weights.local_weights(RegisteredModel(name=name, weights_path="/nowhere", bucket_prefix=f"models/{name}/"))
        try:
            data = (path / "model.safetensors").read_bytes()
        except FileNotFoundError:  # evicted by the other process meanwhile: whole, never half
            missing += 1
            continue
        assert hashlib.sha256(data).hexdigest() == expected[name], name
        read += 1
print(json.dumps({"read": read, "missing": missing}))
"""


@pytest.mark.timeout(240)
def test_two_processes_fetching_and_evicting_at_once_leave_complete_folders_only(s3, settings,  # noqa: F811
                                                                                 tmp_path):
    names = [f"m{n}" for n in range(6)]
    expected = {}
    for name in names:
        folder = tmp_path / "written" / name
        folder.mkdir(parents=True)
        content = os.urandom(200_000)
        (folder / "model.safetensors").write_bytes(content)
        storage.put_folder(folder, f"models/{name}/")
        expected[name] = hashlib.sha256(content).hexdigest()
    env = {**child_process_env(), "ARTIFACT_ROOT": str(settings.ARTIFACT_ROOT), "ARTIFACT_S3_BUCKET": s3.bucket,
           "ARTIFACT_S3_ENDPOINT_URL": settings.ARTIFACT_S3_ENDPOINT_URL, "ARTIFACT_S3_REGION": "us-east-1",
           "ARTIFACT_S3_ADDRESSING_STYLE": "path", "WEIGHTS_CACHE_MAX_BYTES": str(500_000),
           "LOG_LEVEL": "INFO"}  # two models and a half
    children = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(order), json.dumps(expected)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=die_with_the_test_run)
                for order in (names, names[::-1])]
    outcomes, evictions = [], 0
    for child in children:
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, err[-3000:]
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
        evictions += err.count("weights cache: evicted models/")  # each process's log (LOG_LEVEL INFO)
    assert all(outcome["read"] > 0 for outcome in outcomes) and evictions >= 10, (outcomes, evictions)
    # Only complete folders are left, each the bucket's copy, each in the index; no download or eviction
    # leftovers; under the limit.
    root = cache(settings)
    left = sorted(p.name for p in (root / "models").iterdir())
    assert left and not [name for name in left if name.startswith(".")], left
    for name in left:
        folder = root / "models" / name
        assert [p.name for p in folder.iterdir()] == ["model.safetensors"]
        assert hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest() == expected[name]
    indexed = sorted(json.loads(entry.read_text())["path"] for entry in (root / ".index").glob("*.json"))
    assert indexed == [f"models/{name}" for name in left]
    assert cached_bytes(settings) <= 500_000
    assert sorted(p.name for p in root.iterdir()) == [".index", ".lock", "models"]


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "WEIGHTS_CACHE_MAX_BYTES must be a number of bytes (0: unbounded), got -1"),
    ("50GB", "WEIGHTS_CACHE_MAX_BYTES must be an integer, got '50GB'"),
])
@pytest.mark.timeout(120)
def test_a_bad_cache_limit_stops_the_start_naming_it(value, message):
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], capture_output=True, text=True,
                            env={**child_process_env(), "WEIGHTS_CACHE_MAX_BYTES": value}, timeout=60)
    assert result.returncode != 0 and message in result.stderr
