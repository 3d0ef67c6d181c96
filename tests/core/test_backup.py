"""`manage.py backup` and `manage.py restore` on the database in use (PostgreSQL through pg_dump and
pg_restore, or SQLite), the artifact folders and an S3 bucket (a real moto server process): what
was there comes back byte for byte; a damaged, hostile or mismatched backup is refused before
anything is touched."""

import io
import json
import tarfile

import pytest
from django.core.management import CommandError, call_command

from apps.core import storage
from apps.datasets.models import Dataset, DatasetRow, DatasetVersion
from apps.datasets.writer import write_version
from apps.projects.models import Project
from tests.core.test_storage_s3 import s3, s3_endpoint  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

RECORDS = [{"prompt": f"question {i} <script>x</script>", "response": f"answer {i}", "label": "ok"} for i in range(40)]


@pytest.fixture
def artifacts(settings, tmp_path):
    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings


def _a_project_with_data(owner, project, settings):
    dataset = Dataset.objects.create(project=project, name="Support tickets", created_by=owner)
    version = write_version(dataset=dataset, records=RECORDS, roles={"prompt": "prompt", "response": "response",
                                                                     "label": "label"})
    sha256, _ = storage.store_stream(io.BytesIO(b"an uploaded original\n" * 100))
    adapter = settings.ARTIFACT_ROOT / "adapters" / "a1" / "adapter_model.safetensors"
    adapter.parent.mkdir(parents=True)
    adapter.write_bytes(b"\x00weights" * 1000)
    return version, sha256, adapter


def _rows(version_pk):
    return list(DatasetRow.objects.filter(version_id=version_pk).order_by("position").values_list("prompt", "response"))


def test_a_backup_restores_the_database_and_the_files_byte_for_byte(artifacts, owner, project, tmp_path):
    version, sha256, adapter = _a_project_with_data(owner, project, artifacts)
    rows, adapter_bytes = _rows(version.pk), adapter.read_bytes()
    target = tmp_path / "backup"
    call_command("backup", str(target))
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["database"]["file"] in manifest["files"] and "artifacts.tar" in manifest["files"]

    # Things go wrong after the backup: the dataset is deleted, a file is lost, a project is renamed.
    Dataset.objects.filter(pk=version.dataset_id).delete()
    storage.blob_path(sha256).unlink()
    adapter.unlink()
    Project.objects.filter(pk=project.pk).update(name="renamed after the backup")

    with pytest.raises(CommandError, match="already holds user accounts"):
        call_command("restore", str(target))
    assert not DatasetVersion.objects.filter(pk=version.pk).exists()  # a refusal changes nothing

    call_command("restore", str(target), "--force")
    assert _rows(version.pk) == rows and len(rows) == 40
    assert DatasetVersion.objects.get(pk=version.pk).row_count == 40
    assert Project.objects.get(pk=project.pk).name == project.name
    assert storage.local_blob(sha256).read_bytes() == b"an uploaded original\n" * 100
    assert adapter.read_bytes() == adapter_bytes


def test_a_backup_goes_into_a_new_or_empty_folder(artifacts, tmp_path):
    target = tmp_path / "used"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(CommandError, match="is not empty"):
        call_command("backup", str(target))
    assert [p.name for p in target.iterdir()] == ["keep.txt"]


def test_a_damaged_backup_is_refused_naming_the_file_and_nothing_is_touched(artifacts, owner, project, tmp_path):
    version, _, _ = _a_project_with_data(owner, project, artifacts)
    target = tmp_path / "backup"
    call_command("backup", str(target))
    manifest = json.loads((target / "manifest.json").read_text())
    database_file = target / manifest["database"]["file"]
    data = bytearray(database_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    database_file.write_bytes(bytes(data))
    Dataset.objects.filter(pk=version.dataset_id).delete()
    with pytest.raises(CommandError, match=f"{database_file.name} does not match its SHA-256"):
        call_command("restore", str(target), "--force")
    assert not DatasetVersion.objects.filter(pk=version.pk).exists()

    (target / "stray.bin").write_bytes(b"?")
    with pytest.raises(CommandError, match="stray.bin is in the backup folder but not in its manifest"):
        call_command("restore", str(target), "--force")
    (target / "manifest.json").write_text("{not json")
    with pytest.raises(CommandError, match="manifest.json is not JSON"):
        call_command("restore", str(target), "--force")
    with pytest.raises(CommandError, match="manifest.json is missing"):
        call_command("restore", str(tmp_path / "nowhere"))


def test_an_archive_member_that_climbs_out_of_its_folder_is_refused_before_anything_is_restored(
        artifacts, owner, project, tmp_path):
    version, _, _ = _a_project_with_data(owner, project, artifacts)
    target = tmp_path / "backup"
    call_command("backup", str(target))
    payload = b"owned"
    with tarfile.open(target / "artifacts.tar", "a") as tar:
        member = tarfile.TarInfo("../../escaped.txt")
        member.size = len(payload)
        tar.addfile(member, io.BytesIO(payload))
    manifest = json.loads((target / "manifest.json").read_text())
    from apps.core.backup import _sha256

    manifest["files"]["artifacts.tar"]["sha256"] = _sha256(target / "artifacts.tar")
    (target / "manifest.json").write_text(json.dumps(manifest))
    Dataset.objects.filter(pk=version.dataset_id).delete()
    with pytest.raises(CommandError, match=r"artifacts.tar: member '../../escaped.txt' would be written outside"):
        call_command("restore", str(target), "--force")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path.parent / "escaped.txt").exists()
    assert not DatasetVersion.objects.filter(pk=version.pk).exists()


def test_a_backup_of_another_database_engine_is_refused(artifacts, owner, project, tmp_path):
    from django.db import connection

    target = tmp_path / "backup"
    call_command("backup", str(target))
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["database"]["vendor"] = "mysql" if connection.vendor != "mysql" else "oracle"
    (target / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CommandError, match=f"backup is of a mysql database; this installation uses {connection.vendor}"):
        call_command("restore", str(target), "--force")


def test_the_buckets_objects_are_backed_up_and_put_back(s3, owner, project, settings, tmp_path):  # noqa: F811
    settings.MEDIA_ROOT = tmp_path / "media"
    sha256, _ = storage.store_stream(io.BytesIO(b"kept in the bucket\n" * 50))
    target = tmp_path / "backup"
    call_command("backup", str(target))
    assert json.loads((target / "manifest.json").read_text())["bucket"]["objects"] == 1
    s3.delete_object(Bucket=s3.bucket, Key=f"blobs/{sha256}")
    call_command("restore", str(target), "--force")
    assert s3.get_object(Bucket=s3.bucket, Key=f"blobs/{sha256}")["Body"].read() == b"kept in the bucket\n" * 50


def test_the_fine_tunes_checkpoints_in_the_bucket_are_backed_up_and_put_back(s3, owner, project, settings,  # noqa: F811
                                                                             tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.ARTIFACT_S3_TRAINING_PREFIX = "training/"
    key = "training/job-7/checkpoints/step-10/MANIFEST.json"
    merged = "models/merged-3/MANIFEST.json"  # a merged model's copy, for workers on other machines
    s3.put_object(Bucket=s3.bucket, Key=key, Body=b'{"files": {}}')
    s3.put_object(Bucket=s3.bucket, Key=merged, Body=b'{"files": {"m": {}}}')
    (tmp_path / "artifacts" / "weights-cache" / "models").mkdir(parents=True)  # refetched on demand: left out
    (tmp_path / "artifacts" / "weights-cache" / "models" / "cached.bin").write_bytes(b"cached")
    target = tmp_path / "backup"
    call_command("backup", str(target))
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["bucket-training"]["objects"] == 1 and manifest["bucket"]["objects"] == 0
    assert manifest["bucket-models"]["objects"] == 1
    with tarfile.open(target / "artifacts.tar") as archive:
        assert not [name for name in archive.getnames() if name.startswith("weights-cache")]
    s3.delete_object(Bucket=s3.bucket, Key=key)
    s3.delete_object(Bucket=s3.bucket, Key=merged)
    call_command("restore", str(target), "--force")
    assert s3.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b'{"files": {}}'
    assert s3.get_object(Bucket=s3.bucket, Key=merged)["Body"].read() == b'{"files": {"m": {}}}'
