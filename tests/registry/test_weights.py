"""A model's weights on a machine that did not write them (issue #22): the adapter (or merged model) is
read from the artifact bucket (a real moto S3 server process) into a local cache, checked against its
folder's manifest, and refused with a clear error naming the model when neither copy can be had."""

import os
import shutil
import socket
import threading
import uuid
from pathlib import Path

import pytest

from apps.core import storage
from apps.registry.models import RegisteredModel
from apps.registry.weights import WeightsUnavailable, local_weights, model_paths
from apps.serving.models import Generation
from apps.serving.services import generation_create, generation_enqueue
from tests.conftest import _start_worker, _stop_worker, wait_for
from tests.core.test_storage_s3 import keys, s3, s3_endpoint  # noqa: F401  (fixtures)
from tests.serving.fixtures import ready
from tests.serving.test_openai_api import register_adapter
from workbench.celery import app

PREFIX = "training/job-4242/adapter/"


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def adapter_folder(root: Path) -> Path:
    """A folder shaped like a PEFT adapter (what the cache code reads of it: files)."""
    root.mkdir(parents=True)
    (root / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8}')
    (root / "adapter_model.safetensors").write_bytes(os.urandom(50_000))
    (root / "nested").mkdir()
    (root / "nested" / "tokenizer.json").write_text("{}")
    return root


def only_in_bucket(project, tmp_path, *, prefix: str = PREFIX, name: str = "Tuned") -> tuple[RegisteredModel, dict]:
    """An adapter registered on another machine: its folder uploaded, then gone from here."""
    folder = adapter_folder(tmp_path / f"machine-a-{uuid.uuid4().hex[:6]}")
    storage.put_folder(folder, prefix)
    written = files_under(folder)
    shutil.rmtree(folder)
    base = ready(project, f"{name} base")
    base.weights_path = str(tmp_path)  # a base model's folder is on every machine (the model roots)
    base.save()
    return RegisteredModel.objects.create(
        project=project, name=name, format="peft", kind="adapter", base_model=base, source_path=str(folder),
        weights_path=str(folder), bucket_prefix=prefix, status="ready", info={}), written


@pytest.mark.timeout(120)
@pytest.mark.django_db
def test_an_adapter_missing_here_is_fetched_from_the_bucket_once_into_the_cache(s3, project, settings,  # noqa: F811
                                                                               tmp_path):
    adapter, written = only_in_bucket(project, tmp_path)
    base, fetched = model_paths(adapter)
    assert base == tmp_path and fetched == Path(settings.ARTIFACT_ROOT) / "weights-cache" / "training" / "job-4242" / "adapter"
    assert files_under(fetched) == written  # the manifest itself is not part of the weights
    # Fetched once: a later load reads the cache, even with the bucket's copy gone.
    storage.delete_folder(PREFIX)
    assert keys(s3) == []
    assert local_weights(adapter) == fetched and files_under(fetched) == written
    # Where the folder is on this machine, it is what loads: the bucket is not asked.
    here = adapter_folder(tmp_path / "here")
    adapter.weights_path = str(here)
    assert local_weights(adapter) == here


@pytest.mark.timeout(120)
@pytest.mark.django_db
def test_concurrent_loads_on_one_machine_share_one_complete_copy(s3, project, settings, tmp_path):  # noqa: F811
    adapter, written = only_in_bucket(project, tmp_path)
    start, results, errors = threading.Barrier(8), [], []

    def load():
        start.wait()
        try:
            results.append(local_weights(adapter))
        except Exception as exc:  # the assertion below says which
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(results) == 8 and len(set(results)) == 1
    assert files_under(results[0]) == written
    # The losers' downloads are gone: only the one folder is left beside nothing else.
    assert [p.name for p in results[0].parent.iterdir()] == ["adapter"]


@pytest.mark.timeout(120)
@pytest.mark.django_db
def test_a_damaged_or_incomplete_bucket_copy_is_refused_naming_the_model_and_nothing_is_cached(
        s3, project, settings, tmp_path):  # noqa: F811
    adapter, _ = only_in_bucket(project, tmp_path)
    s3.put_object(Bucket=s3.bucket, Key=f"{PREFIX}adapter_model.safetensors", Body=b"tampered")  # after its manifest
    with pytest.raises(WeightsUnavailable) as refused:
        model_paths(adapter)
    assert refused.value.message == (
        f"The artifact bucket's copy of “Tuned”'s weights was refused: {PREFIX}adapter_model.safetensors "
        "differs from its folder's manifest.")
    cache = Path(settings.ARTIFACT_ROOT) / "weights-cache"
    # Nothing half-written, nothing trusted (the cache's lock file is no weights).
    assert not [p for p in cache.rglob("*") if p.is_file() and p.name != ".lock"]

    s3.put_object(Bucket=s3.bucket, Key=f"{PREFIX}MANIFEST.json", Body=b'{"files": {"../../escape": '
                                                                     b'{"sha256": "' + b"0" * 64 + b'", "bytes": 1}}}')
    with pytest.raises(WeightsUnavailable, match="names a file outside its folder"):
        local_weights(adapter)

    s3.delete_object(Bucket=s3.bucket, Key=f"{PREFIX}MANIFEST.json")  # an upload killed before its manifest
    with pytest.raises(WeightsUnavailable) as incomplete:
        local_weights(adapter)
    assert incomplete.value.message == ("The weights of “Tuned” are not on this machine, and the artifact bucket has "
                                        f"no complete copy of them ({PREFIX}).")
    assert not [p for p in cache.rglob("*") if p.is_file() and p.name != ".lock"]


@pytest.mark.django_db
def test_without_a_local_folder_or_a_bucket_copy_the_error_names_the_model(project, settings, tmp_path):
    settings.ARTIFACT_S3_BUCKET = ""
    adapter = RegisteredModel.objects.create(
        project=project, name="Lost", format="peft", kind="adapter", base_model=ready(project, "Base"),
        source_path="/gone", weights_path=str(tmp_path / "gone"), bucket_prefix=PREFIX, status="ready", info={})
    with pytest.raises(WeightsUnavailable) as no_bucket:
        local_weights(adapter)
    assert no_bucket.value.message == (f"The weights of “Lost” are not on this machine ({tmp_path / 'gone'}), and no "
                                       f"artifact bucket is configured (ARTIFACT_S3_BUCKET) to fetch them from "
                                       f"({PREFIX}).")
    assert no_bucket.value.status == 409 and no_bucket.value.field == "model"
    adapter.bucket_prefix = ""
    with pytest.raises(WeightsUnavailable, match=r"^The weights of “Lost” are not on this machine \(.*gone\), and "
                                                 "the artifact bucket has no copy of them.$"):
        local_weights(adapter)
    # The base is asked too: an adapter on a base whose folder is missing names the base.
    adapter.weights_path = str(tmp_path)
    with pytest.raises(WeightsUnavailable, match="^The weights of “Base” are not on this machine"):
        model_paths(adapter)


@pytest.mark.django_db
def test_a_hostile_bucket_location_is_refused_before_anything_is_written(s3, project, settings, tmp_path):  # noqa: F811
    # A name with a leading dot is the cache's own (its index, downloads and evictions under way).
    for prefix in ("../../etc/", "training//adapter/", "/abs/", "no-slash", ".index/", "models/.m-download-x/"):
        adapter = RegisteredModel(project=project, name="Odd", kind="adapter", weights_path=str(tmp_path / "gone"),
                                  bucket_prefix=prefix)
        with pytest.raises(WeightsUnavailable, match="^The bucket location of “Odd”'s weights is not a folder"):
            local_weights(adapter)
    assert not (Path(settings.ARTIFACT_ROOT) / "weights-cache").exists()


QUESTION = [{"role": "user", "content": "what is the capital of france ?"}]


def answer_here(base: RegisteredModel, adapter_dir: Path) -> str:
    """The adapter's greedy answer, loaded the ordinary way in this process."""
    from peft import PeftModel

    from workers.inference import SamplingParams, generate_batch, render_prompt
    from workers.models import load_for_inference

    net, tokenizer = load_for_inference(base.weights_path)
    net = PeftModel.from_pretrained(net, str(adapter_dir)).eval()
    prompt = render_prompt(tokenizer, messages=QUESTION)
    return generate_batch(net, tokenizer, [prompt], SamplingParams(max_new_tokens=12))[0].text


def generate(owner, model: RegisteredModel) -> Generation:
    generation = generation_create(user=owner, project=model.project, model_ref=model.name, source="api",
                                   messages=QUESTION, params={"max_new_tokens": 12, "temperature": 0})
    generation_enqueue(generation.pk)
    return wait_for(lambda: Generation.objects.filter(pk=generation.pk, state__in=Generation.ENDED).first(),
                    timeout=90, interval=0.2, what=f"the generation of {model.name}")


def moved_to_the_bucket(adapter: RegisteredModel, prefix: str) -> None:
    """The adapter as a worker on another machine sees it: in the bucket, not at `weights_path`."""
    storage.put_folder(Path(adapter.weights_path), prefix)
    shutil.rmtree(adapter.weights_path)
    RegisteredModel.objects.filter(pk=adapter.pk).update(bucket_prefix=prefix)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.django_db(transaction=True)
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_an_inference_worker_on_another_machine_answers_with_the_adapter_it_reads_from_the_bucket(
        owner, project, tiny_model, redis_service, s3, tmp_path):  # noqa: F811
    tuned, damaged, lost = (register_adapter(tiny_model, owner, seed=seed, target_modules=["q_proj", "v_proj"])
                            for seed in (1, 2, 3))
    expected = answer_here(tiny_model, Path(tuned.weights_path))
    moved_to_the_bucket(tuned, "training/job-1/adapter/")
    moved_to_the_bucket(damaged, "training/job-2/adapter/")
    s3.put_object(Bucket=s3.bucket, Key="training/job-2/adapter/adapter_model.safetensors", Body=b"bit rot")
    shutil.rmtree(lost.weights_path)  # its machine gone before any upload

    # Only the other machine's worker consumes `inference`: a session worker, if one runs, leaves it meanwhile.
    session_worker = f"test-inference-{os.getpid()}@{socket.gethostname()}"
    app.control.cancel_consumer("inference", destination=[session_worker], reply=True, timeout=2)
    other_machine = tmp_path / "host-b"
    from django.conf import settings

    worker = _start_worker(queues="inference", pool="threads", concurrency=2, name="host-b", env={
        "ARTIFACT_ROOT": str(other_machine), "ARTIFACT_S3_BUCKET": s3.bucket,
        "ARTIFACT_S3_ENDPOINT_URL": settings.ARTIFACT_S3_ENDPOINT_URL, "ARTIFACT_S3_REGION": "us-east-1",
        "ARTIFACT_S3_ADDRESSING_STYLE": "path"})
    try:
        served = generate(owner, tuned)
        assert served.state == "succeeded", served.error
        assert served.output == expected and served.completion_tokens > 0
        cached = other_machine / "weights-cache" / "training" / "job-1" / "adapter"
        assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in cached.iterdir()}
        assert not Path(tuned.weights_path).exists()

        refused = generate(owner, damaged)
        assert refused.state == "failed" and refused.error == (
            f"The artifact bucket's copy of “{damaged.name}”'s weights was refused: "
            "training/job-2/adapter/adapter_model.safetensors differs from its folder's manifest.")
        assert not [p for p in (other_machine / "weights-cache" / "training" / "job-2").rglob("*") if p.is_file()]

        missing = generate(owner, lost)
        assert missing.state == "failed" and missing.error == (
            f"The weights of “{lost.name}” are not on this machine ({lost.weights_path}), and the artifact bucket "
            "has no copy of them.")
    finally:
        _stop_worker(worker)
        app.control.add_consumer("inference", destination=[session_worker], reply=True, timeout=2)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.django_db
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_a_merge_reads_its_adapter_from_the_bucket_and_uploads_the_merged_model_for_other_machines(
        owner, project, tiny_model, s3, settings, tmp_path):  # noqa: F811
    from apps.registry.services import adapter_merge, run_merge

    adapter = register_adapter(tiny_model, owner, seed=4, target_modules=["q_proj", "v_proj"])
    moved_to_the_bucket(adapter, "training/job-3/adapter/")
    adapter.refresh_from_db()
    merged = adapter_merge(user=owner, adapter=adapter, name="Merged")
    run_merge(merged.pk)  # what the registry.merge task runs, on a machine without the adapter's folder
    merged.refresh_from_db()
    assert merged.status == "ready", merged.error
    assert merged.bucket_prefix == f"models/merged-{merged.pk}/"
    written = files_under(Path(merged.weights_path))
    assert "model.safetensors" in written

    settings.ARTIFACT_ROOT = tmp_path / "host-c"  # another machine: the merged folder is not there
    shutil.rmtree(merged.weights_path)
    fetched = local_weights(merged)
    assert fetched == tmp_path / "host-c" / "weights-cache" / "models" / f"merged-{merged.pk}"
    assert files_under(fetched) == written
