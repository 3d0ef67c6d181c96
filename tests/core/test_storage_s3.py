"""The artifact store on an S3-compatible bucket, against a real S3 server process (moto_server)."""

import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid

import pytest
from boto3.exceptions import S3UploadFailedError

from apps.core import storage
from apps.datasets.models import DatasetVersion
from apps.datasets.services import dataset_create
from tests.conftest import die_with_the_test_run, free_port


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """A moto S3 server on a free port, with dummy credentials; no real account is ever reached."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with pytest.MonkeyPatch.context() as env, open(log, "wb") as log_file:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        env.setenv("AWS_CONFIG_FILE", os.devnull)
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=log_file, stderr=subprocess.STDOUT, preexec_fn=die_with_the_test_run)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"moto_server did not start: {log.read_text()[-2000:]}") from None
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def s3(s3_endpoint, settings, tmp_path):
    """A fresh bucket configured as the artifact store; returns a client to inspect it with."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    bucket = f"artifacts-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.ARTIFACT_S3_BUCKET = bucket
    settings.ARTIFACT_S3_ENDPOINT_URL = s3_endpoint
    settings.ARTIFACT_S3_REGION = "us-east-1"
    settings.ARTIFACT_S3_PREFIX = "blobs/"
    settings.ARTIFACT_S3_ADDRESSING_STYLE = "path"
    client.bucket = bucket
    return client


def keys(s3) -> list[str]:
    return [item["Key"] for item in s3.list_objects_v2(Bucket=s3.bucket).get("Contents", [])]


def read_object(s3, sha256: str) -> bytes:
    return s3.get_object(Bucket=s3.bucket, Key=f"blobs/{sha256}")["Body"].read()


def local_files(settings) -> list[str]:
    """Every file under ARTIFACT_ROOT, temporary ones included."""
    root = settings.ARTIFACT_ROOT
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def clear_cache(settings) -> None:
    for path in (settings.ARTIFACT_ROOT / "blob-cache").rglob("*"):
        if path.is_file():
            path.unlink()


def test_the_same_content_stored_twice_is_one_object_under_its_sha256(s3, settings):
    content = b'{"prompt": "hello"}\n' * 100
    sha256, size = storage.store_stream(io.BytesIO(content))
    assert (sha256, size) == (hashlib.sha256(content).hexdigest(), len(content))
    assert keys(s3) == [f"blobs/{sha256}"]
    assert read_object(s3, sha256) == content
    # Deduplication: an object already under that key is not uploaded again. (Planting other bytes
    # there shows it: a second upload would have replaced them.)
    s3.put_object(Bucket=s3.bucket, Key=f"blobs/{sha256}", Body=b"planted")
    assert storage.store_stream(io.BytesIO(content)) == (sha256, size)
    assert keys(s3) == [f"blobs/{sha256}"]
    assert read_object(s3, sha256) == b"planted"
    # Nothing temporary left behind; the one local copy is the verified cache entry.
    assert local_files(settings) == [f"blob-cache/{sha256[:2]}/{sha256}"]


def test_a_large_file_goes_up_in_parts_and_comes_back_whole(s3, settings, tmp_path):
    content = os.urandom(20 * 1024 * 1024)  # above boto3's 8 MB multipart threshold
    source = tmp_path / "big.bin"
    source.write_bytes(content)
    sha256, size = storage.store_file(source)
    assert size == len(content)
    head = s3.head_object(Bucket=s3.bucket, Key=f"blobs/{sha256}")
    assert head["ContentLength"] == len(content)
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload's ETag counts its parts
    clear_cache(settings)
    path = storage.local_blob(sha256)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha256


def test_local_blob_downloads_once_into_the_cache(s3, settings):
    content = b"id,prompt\n1,hi\n"
    sha256, _ = storage.store_stream(io.BytesIO(content))
    clear_cache(settings)
    path = storage.local_blob(sha256)
    assert path == settings.ARTIFACT_ROOT / "blob-cache" / sha256[:2] / sha256
    assert path.read_bytes() == content
    # Served from the cache from now on: the bucket is not asked again.
    s3.delete_object(Bucket=s3.bucket, Key=f"blobs/{sha256}")
    assert storage.local_blob(sha256) == path
    with storage.open_blob(sha256) as handle:
        assert handle.read() == content
    copy = settings.ARTIFACT_ROOT.parent / "copy.csv"
    storage.copy_blob_to(sha256, copy)
    assert copy.read_bytes() == content


def test_a_corrupt_object_is_refused_and_nothing_is_cached(s3, settings):
    sha256, _ = storage.store_stream(io.BytesIO(b"the original bytes"))
    clear_cache(settings)
    s3.put_object(Bucket=s3.bucket, Key=f"blobs/{sha256}", Body=b"bit rot")
    with pytest.raises(storage.CorruptBlob, match=f"blob {sha256} .* is corrupt"):
        storage.local_blob(sha256)
    with pytest.raises(storage.CorruptBlob):
        storage.open_blob(sha256)
    assert local_files(settings) == []


def test_a_missing_object_is_file_not_found(s3, settings):
    with pytest.raises(FileNotFoundError, match="not in the artifact bucket"):
        storage.local_blob("0" * 64)
    assert local_files(settings) == []


@pytest.mark.parametrize("digest", [
    "../" * 21 + "a", "0" * 63, "0" * 65, "A" * 64, "0" * 62 + "/x", "", None,
])
def test_anything_but_a_sha256_hex_digest_is_refused(s3, settings, digest):
    for read in (storage.local_blob, storage.open_blob, storage.blob_path):
        with pytest.raises(ValueError, match="not a sha256 hex digest"):
            read(digest)
    assert keys(s3) == [] and local_files(settings) == []


def test_a_failed_upload_leaves_no_object_and_no_temporary_file(s3, settings):
    settings.ARTIFACT_S3_BUCKET = f"missing-{uuid.uuid4().hex[:12]}"
    with pytest.raises(S3UploadFailedError, match="NoSuchBucket"):
        storage.store_stream(io.BytesIO(b"goes nowhere"))
    assert local_files(settings) == []


def test_a_stream_that_breaks_midway_leaves_nothing(s3, settings):
    class Broken(io.RawIOBase):
        def __init__(self):
            self.reads = 0

        def read(self, size=-1):
            self.reads += 1
            if self.reads > 2:
                raise ConnectionResetError("client went away")
            return b"x" * 1024

    with pytest.raises(ConnectionResetError):
        storage.store_stream(Broken())
    assert keys(s3) == [] and local_files(settings) == []


def test_the_local_folder_stays_the_default(settings, tmp_path):
    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.ARTIFACT_S3_BUCKET = ""
    sha256, _ = storage.store_stream(io.BytesIO(b"local bytes"))
    assert storage.local_blob(sha256) == storage.blob_path(sha256) == tmp_path / "artifacts/blobs" / sha256[:2] / sha256
    assert local_files(settings) == [f"blobs/{sha256[:2]}/{sha256}"]


@pytest.mark.django_db
def test_an_uploaded_import_is_kept_in_the_bucket_and_imported_from_it(s3, settings, client, scientist, project,
                                                                        monkeypatch,
                                                                        django_capture_on_commit_callbacks):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from workbench.celery import app

    # The queued import runs here, in this process (and this test's settings), not in a worker.
    monkeypatch.setitem(app.conf, "task_always_eager", True)
    dataset = dataset_create(user=scientist, project=project, name="Questions")
    client.force_login(scientist)
    content = b'{"id": "q1", "prompt": "2+2?", "response": "4"}\n{"id": "q2", "prompt": "3+3?", "response": "6"}\n'
    created = client.post(f"/api/projects/{project.pk}/datasets/{dataset.pk}/imports/",
                          {"file": SimpleUploadedFile("q.jsonl", content)})
    assert created.status_code == 201, created.content
    sha256 = hashlib.sha256(content).hexdigest()
    assert keys(s3) == [f"blobs/{sha256}"]
    assert not (settings.ARTIFACT_ROOT / "blobs").exists()
    clear_cache(settings)  # as on a worker that never saw the upload: the importer must fetch it

    job_id = created.json()["id"]
    with django_capture_on_commit_callbacks(execute=True):  # the job is queued when its transaction commits
        started = client.post(f"/api/imports/{job_id}/start/",
                              {"mapping": {"id": "id", "prompt": "prompt", "response": "response"}},
                              content_type="application/json")
    assert started.status_code == 202, started.content
    job = client.get(f"/api/imports/{job_id}/").json()
    assert job["state"] == "succeeded", job["error"]
    version = DatasetVersion.objects.get(dataset=dataset, number=job["version"])
    assert version.source["artifact_sha256"] == sha256
    assert list(version.rows.order_by("position").values_list("ext_id", "prompt")) == [("q1", "2+2?"),
                                                                                      ("q2", "3+3?")]
    assert (settings.ARTIFACT_ROOT / "blob-cache" / sha256[:2] / sha256).read_bytes() == content


def test_the_local_cache_keeps_under_its_size_evicting_the_least_recently_used(s3, settings):
    settings.ARTIFACT_BLOB_CACHE_MAX_BYTES = 2500
    blobs = [storage.store_stream(io.BytesIO(bytes([n]) * 1000))[0] for n in range(2)]  # 2,000 bytes cached
    os.utime(storage.local_blob(blobs[0]), (1, 1))  # used long ago
    os.utime(storage.local_blob(blobs[1]), (2, 2))
    storage.local_blob(blobs[0])  # used again now: blobs[1] is the least recently used
    third = storage.store_stream(io.BytesIO(b"\x07" * 1000))[0]  # 3,000 bytes: one must go
    cached = sorted(p.name for p in (settings.ARTIFACT_ROOT / "blob-cache").glob("*/*"))
    assert cached == sorted([blobs[0], third])
    # An evicted blob comes back from the bucket when read again.
    assert storage.local_blob(blobs[1]).read_bytes() == b"\x01" * 1000


@pytest.mark.django_db
def test_uploads_ask_for_the_server_side_encryption_configured(s3, settings):
    settings.ARTIFACT_S3_SSE = "AES256"
    sha256, _ = storage.store_stream(io.BytesIO(b"encrypted at rest"))
    assert s3.head_object(Bucket=s3.bucket, Key=f"blobs/{sha256}")["ServerSideEncryption"] == "AES256"
    settings.ARTIFACT_S3_SSE, settings.ARTIFACT_S3_SSE_KMS_KEY_ID = "aws:kms", "alias/workbench"
    kms, _ = storage.store_stream(io.BytesIO(b"under a KMS key"))
    head = s3.head_object(Bucket=s3.bucket, Key=f"blobs/{kms}")
    assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"].endswith("alias/workbench")


@pytest.mark.parametrize(("environment", "message"), [
    ({"ARTIFACT_S3_SSE": "rot13"}, "ARTIFACT_S3_SSE must be AES256 or aws:kms"),
    ({"ARTIFACT_S3_SSE_KMS_KEY_ID": "key-1"}, "ARTIFACT_S3_SSE_KMS_KEY_ID needs ARTIFACT_S3_SSE=aws:kms"),
    ({"ARTIFACT_S3_TRAINING_PREFIX": "training"}, "ARTIFACT_S3_TRAINING_PREFIX must end with /"),
    ({"ARTIFACT_S3_TRAINING_PREFIX": "blobs/training/"}, "ARTIFACT_S3_TRAINING_PREFIX must end with / and lie "
                                                         "outside ARTIFACT_S3_PREFIX"),
])
def test_a_bad_bucket_setting_stops_the_start_naming_it(environment, message):
    from tests.conftest import child_process_env

    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], capture_output=True, text=True,
                            env={**child_process_env(), **environment}, timeout=60)
    assert result.returncode != 0 and message in result.stderr


# --- folders: files first, the manifest last; readers trust only the manifest -------------------------

def a_folder(root) -> dict[str, bytes]:
    files = {"COMPLETE": b"", "adapter/adapter_model.safetensors": os.urandom(3000), "state.json": b'{"step": 7}'}
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return files


def files_under(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_folder_goes_up_with_its_manifest_and_comes_back_checked(s3, settings, tmp_path):
    files = a_folder(tmp_path / "written")
    (tmp_path / "written" / "elsewhere").symlink_to("/etc/hostname")  # links are not followed out
    manifest = storage.put_folder(tmp_path / "written", "jobs/job-1/step-7/")
    assert sorted(manifest["files"]) == sorted(files)
    assert manifest["files"]["state.json"] == {"sha256": hashlib.sha256(b'{"step": 7}').hexdigest(), "bytes": 11}
    assert sorted(keys(s3)) == sorted([f"jobs/job-1/step-7/{name}" for name in files]
                                      + ["jobs/job-1/step-7/MANIFEST.json"])
    assert storage.folder_names("jobs/job-1/") == {"step-7": True}
    (tmp_path / "read").mkdir()
    assert storage.get_folder("jobs/job-1/step-7/", tmp_path / "read") == manifest
    assert files_under(tmp_path / "read") == files


def test_a_folder_whose_upload_stopped_part_way_has_no_manifest_and_is_not_trusted(s3, settings, tmp_path):
    (tmp_path / "written").mkdir()
    (tmp_path / "written" / "A-first.bin").write_bytes(b"uploaded before the failure")
    (tmp_path / "written" / "MANIFEST.json").write_bytes(b"{}")  # sorts after A-first.bin: the upload stops there
    (tmp_path / "written" / "later.bin").write_bytes(b"never uploaded")
    with pytest.raises(ValueError, match="has the name of the folder's manifest"):
        storage.put_folder(tmp_path / "written", "jobs/job-1/step-9/")
    assert keys(s3) == ["jobs/job-1/step-9/A-first.bin"]
    assert storage.folder_names("jobs/job-1/") == {"step-9": False}
    (tmp_path / "read").mkdir()
    with pytest.raises(FileNotFoundError, match="step-9/ has no manifest"):
        storage.get_folder("jobs/job-1/step-9/", tmp_path / "read")
    assert files_under(tmp_path / "read") == {}


def test_a_file_changed_or_lost_after_its_manifest_is_refused(s3, settings, tmp_path):
    a_folder(tmp_path / "written")
    storage.put_folder(tmp_path / "written", "jobs/job-1/step-7/")
    s3.put_object(Bucket=s3.bucket, Key="jobs/job-1/step-7/state.json", Body=b'{"step": 9}')  # same size
    (tmp_path / "read").mkdir()
    with pytest.raises(storage.CorruptFolder, match="state.json differs from its folder's manifest"):
        storage.get_folder("jobs/job-1/step-7/", tmp_path / "read")
    s3.delete_object(Bucket=s3.bucket, Key="jobs/job-1/step-7/state.json")
    with pytest.raises(storage.CorruptFolder, match="state.json, in its folder's manifest, is not in the bucket"):
        storage.get_folder("jobs/job-1/step-7/", tmp_path / "read")


GOOD = {"sha256": hashlib.sha256(b"x").hexdigest(), "bytes": 1}


@pytest.mark.parametrize(("manifest", "message"), [
    (b"not json", "is not a JSON object with its files"),
    (b"[1, 2]", "is not a JSON object with its files"),
    (b'{"files": null}', "lists no files"),
    (b'{"files": {}}', "lists no files"),
    (b'{"files": ["x"]}', "lists no files"),
    (b'{"files": {"x": "sha"}}', "has no SHA-256 and size for 'x'"),
    (b'{"files": {"x": {"sha256": 5, "bytes": 1}}}', "has no SHA-256 and size for 'x'"),
    (b'{"files": {"x": {"sha256": "' + b"0" * 64 + b'", "bytes": true}}}', "has no SHA-256 and size for 'x'"),
    (b'{"files": {"x": {"sha256": "' + b"0" * 64 + b'", "bytes": -1}}}', "has no SHA-256 and size for 'x'"),
    (b" " * (1024 * 1024 + 1), "is larger than 1048576 bytes"),
    *[(json.dumps({"files": {name: GOOD}}).encode(), "names a file outside its folder")
      for name in ("../escaped", "/etc/passwd", "a/../../escaped", "a//b", "./a", "a\\..\\b", "nul\x00",
                   "MANIFEST.json", "")],
])
def test_a_malformed_or_hostile_manifest_is_refused_and_nothing_is_written(s3, settings, tmp_path, manifest,
                                                                           message):
    s3.put_object(Bucket=s3.bucket, Key="jobs/job-1/step-7/x", Body=b"x")
    s3.put_object(Bucket=s3.bucket, Key="jobs/job-1/step-7/MANIFEST.json", Body=manifest)
    destination = tmp_path / "deep" / "read"
    destination.mkdir(parents=True)
    with pytest.raises(storage.CorruptFolder, match=re.escape(message)):
        storage.get_folder("jobs/job-1/step-7/", destination)
    assert files_under(tmp_path) == {}


def test_a_deleted_folder_loses_its_manifest_and_its_files_and_nothing_else(s3, settings, tmp_path):
    a_folder(tmp_path / "written")
    storage.put_folder(tmp_path / "written", "jobs/job-1/step-7/")
    storage.put_folder(tmp_path / "written", "jobs/job-1/step-70/")
    storage.delete_folder("jobs/job-1/step-7/")
    assert storage.folder_names("jobs/job-1/") == {"step-70": True}
    assert all(key.startswith("jobs/job-1/step-70/") for key in keys(s3))


@pytest.mark.parametrize("prefix", ["jobs/job-1", "/jobs/", "jobs/../blobs/", ""])
def test_a_folder_prefix_must_be_a_plain_folder(s3, settings, tmp_path, prefix):
    for call in (lambda: storage.put_folder(tmp_path, prefix), lambda: storage.get_folder(prefix, tmp_path),
                 lambda: storage.folder_names(prefix), lambda: storage.delete_folder(prefix)):
        with pytest.raises(ValueError, match="not a folder's key prefix"):
            call()
