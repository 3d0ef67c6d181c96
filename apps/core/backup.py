"""Backups of a Workbench: the database, the artifact folders and the bucket, in one folder with
a manifest of SHA-256 sums; and their restore (`manage.py backup DIR`, `manage.py restore DIR`).

- database: PostgreSQL through `pg_dump --format=custom` (restored with `pg_restore --clean` in
  one transaction); SQLite through its online backup API (consistent while the server runs).
- files: ARTIFACT_ROOT (adapters, checkpoints, exports, local blobs) and MEDIA_ROOT, as tar
  archives; the bucket blob cache is left out (it is refetched on demand).
- bucket: with ARTIFACT_S3_BUCKET set, every object under ARTIFACT_S3_PREFIX (folder bucket/) and
  under ARTIFACT_S3_TRAINING_PREFIX (fine-tunes' checkpoints and adapters; folder bucket-training/) and
  ARTIFACT_S3_MODELS_PREFIX (merged models; folder bucket-models/), downloaded.
Secrets (SECRET_KEY, PROVIDER_KEYS, the embedded default's key files) are not in a backup: keep
them apart; provider keys cannot be read back without the key they were encrypted with.

A restore checks every file against the manifest before it touches anything, refuses a backup
of another database engine, and refuses a database that holds user accounts unless forced.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import tarfile
from pathlib import Path

from django.conf import settings
from django.db import connection, connections
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

from apps.core import storage

FORMAT = 1
MANIFEST = "manifest.json"
LEFT_OUT = {"blob-cache", "weights-cache"}  # under ARTIFACT_ROOT: copies of bucket objects, refetched on demand


class BackupError(Exception):
    """What went wrong, in words, naming the file or setting concerned."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _roots() -> dict[str, Path]:
    return {"artifacts": Path(settings.ARTIFACT_ROOT), "media": Path(settings.MEDIA_ROOT)}


def _pg_command(program: str) -> tuple[list[str], dict]:
    """`program` with the connection's options (the password through the environment)."""
    db = connection.settings_dict
    args = [program, "--no-password", f"--dbname={db['NAME']}"]
    if db.get("HOST"):
        args.append(f"--host={db['HOST']}")
    if db.get("PORT"):
        args.append(f"--port={db['PORT']}")
    if db.get("USER"):
        args.append(f"--username={db['USER']}")
    env = {**os.environ}
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = db["PASSWORD"]
    if sslmode := (db.get("OPTIONS") or {}).get("sslmode"):
        env["PGSSLMODE"] = sslmode
    return args, env


def _run(args: list[str], env: dict, what: str) -> None:
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=6 * 3600)
    if result.returncode != 0:
        raise BackupError(f"{what} failed: {result.stderr.strip()[-2000:]}")


def backup(destination: Path) -> dict:
    """Write a backup into `destination` (a new or empty folder); returns its manifest."""
    destination = Path(destination)
    if destination.exists() and any(destination.iterdir()):
        raise BackupError(f"{destination} is not empty: a backup goes into a new or empty folder")
    destination.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"format": FORMAT, "created_at": timezone.now().isoformat(), "files": {}}

    vendor = connection.vendor
    if vendor == "postgresql":
        database_file = destination / "database.pgdump"
        args, env = _pg_command("pg_dump")
        _run([*args, "--format=custom", "--no-owner", "--no-privileges", f"--file={database_file}"], env, "pg_dump")
    elif vendor == "sqlite":
        database_file = destination / "database.sqlite3"
        source = sqlite3.connect(str(connection.settings_dict["NAME"]))
        target = sqlite3.connect(str(database_file))
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
    else:
        raise BackupError(f"backups of a {vendor} database are not supported")
    manifest["database"] = {"vendor": vendor, "file": database_file.name}
    manifest["migrations"] = sorted(MigrationRecorder(connection).applied_migrations())

    for name, root in _roots().items():
        if not root.is_dir():
            continue
        archive = destination / f"{name}.tar"
        with tarfile.open(archive, "w") as tar:
            for child in sorted(root.iterdir()):
                if not (name == "artifacts" and child.name in LEFT_OUT):
                    tar.add(child, arcname=child.name)

    if settings.ARTIFACT_S3_BUCKET:
        bucket = settings.ARTIFACT_S3_BUCKET
        for folder, prefix in _bucket_areas().items():
            objects = []
            for page in storage._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    relative = item["Key"][len(prefix):]
                    if not relative or relative.startswith("/") or ".." in Path(relative).parts:
                        raise BackupError(f"bucket key {item['Key']!r} cannot be kept as a file")
                    target = destination / folder / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    storage._s3().download_file(bucket, item["Key"], str(target))
                    objects.append(relative)
            manifest[folder] = {"bucket": bucket, "prefix": prefix, "objects": len(objects)}

    for path in sorted(p for p in destination.rglob("*") if p.is_file()):
        manifest["files"][path.relative_to(destination).as_posix()] = {"sha256": _sha256(path),
                                                                       "bytes": path.stat().st_size}
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return manifest


def _read_manifest(source: Path) -> dict:
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(f"{source / MANIFEST} is missing: not a Workbench backup") from None
    except ValueError as exc:
        raise BackupError(f"{source / MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{source / MANIFEST}: unknown backup format {manifest.get('format')!r}")
    return manifest


def _verify(source: Path, manifest: dict) -> None:
    listed = manifest.get("files") or {}
    present = {p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()} - {MANIFEST}
    if extra := sorted(present - set(listed)):
        raise BackupError(f"{extra[0]} is in the backup folder but not in its manifest")
    for name, entry in listed.items():
        path = source / name
        if ".." in Path(name).parts or not path.is_file():
            raise BackupError(f"{name} is listed in the manifest but missing")
        if _sha256(path) != entry.get("sha256"):
            raise BackupError(f"{name} does not match its SHA-256 in the manifest (damaged or changed)")


def _holds_data() -> bool:
    """Whether the database has anyone's account in it (a fresh, migrated one has none)."""
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    return user_model._meta.db_table in connection.introspection.table_names() and user_model.objects.exists()


def _safe_members(tar: tarfile.TarFile, archive: str) -> None:
    for member in tar.getmembers():
        if member.name.startswith("/") or ".." in Path(member.name).parts:
            raise BackupError(f"{archive}: member {member.name!r} would be written outside its folder")
        if not (member.isfile() or member.isdir()):
            raise BackupError(f"{archive}: member {member.name!r} is not a plain file or folder")


def restore(source: Path, *, force: bool = False) -> dict:
    """Restore the backup in `source` over this installation's database, folders and bucket."""
    source = Path(source)
    manifest = _read_manifest(source)
    _verify(source, manifest)
    database = manifest.get("database") or {}
    if database.get("vendor") != connection.vendor:
        raise BackupError(f"the backup is of a {database.get('vendor')} database; this installation uses "
                          f"{connection.vendor}")
    archives = {}
    for name in _roots():
        if f"{name}.tar" in manifest["files"]:
            archives[name] = tarfile.open(source / f"{name}.tar")
            _safe_members(archives[name], f"{name}.tar")
    if not force and _holds_data():
        raise BackupError("this database already holds user accounts: restoring replaces everything in it "
                          "(pass --force to do so)")

    database_file = source / database["file"]
    if connection.vendor == "postgresql":
        connections.close_all()
        args, env = _pg_command("pg_restore")
        _run([*args, "--clean", "--if-exists", "--no-owner", "--no-privileges", "--single-transaction",
              str(database_file)], env, "pg_restore")
    else:
        connections.close_all()
        backup_copy = sqlite3.connect(str(database_file))
        target = sqlite3.connect(str(connection.settings_dict["NAME"]))
        try:
            backup_copy.backup(target)
        finally:
            target.close()
            backup_copy.close()

    for name, tar in archives.items():
        root = _roots()[name]
        root.mkdir(parents=True, exist_ok=True)
        with tar:
            tar.extractall(root, filter="data")

    for folder, prefix in _bucket_areas().items():
        bucket_files = sorted(name for name in manifest["files"] if name.startswith(f"{folder}/"))
        if bucket_files and not settings.ARTIFACT_S3_BUCKET:
            raise BackupError("the backup holds bucket objects but ARTIFACT_S3_BUCKET is not set")
        for name in bucket_files:
            key = prefix + name[len(folder) + 1:]
            storage._s3().upload_file(str(source / name), settings.ARTIFACT_S3_BUCKET, key,
                                      ExtraArgs=storage.upload_encryption())
    return manifest


def _bucket_areas() -> dict[str, str]:
    """The backup's folder for each prefix of the bucket: the content-addressed artifacts, the
    fine-tunes' checkpoints and adapters (ARTIFACT_S3_TRAINING_PREFIX), merged models (ARTIFACT_S3_MODELS_PREFIX)."""
    return {"bucket": settings.ARTIFACT_S3_PREFIX, "bucket-training": settings.ARTIFACT_S3_TRAINING_PREFIX,
            "bucket-models": settings.ARTIFACT_S3_MODELS_PREFIX}


def remove_partial(destination: Path) -> None:
    """A backup that failed half-way is removed rather than left looking complete."""
    shutil.rmtree(destination, ignore_errors=True)
