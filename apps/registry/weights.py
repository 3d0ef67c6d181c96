"""Where a registered model's weights are on this machine: the one question every loader asks
(serving, comparisons, suggestions, evaluations, classification, exports, merges, fine-tunes).

A fine-tune's adapter, and a model merged from one, are written on the machine that made them and
uploaded to the artifact bucket when one is configured (`RegisteredModel.bucket_prefix`). A worker on
another machine (another ARTIFACT_ROOT) has none of their files: it fetches the bucket's copy once
into ARTIFACT_ROOT/weights-cache/<prefix>, every file checked against the folder's manifest
(apps.core.storage.get_folder). The copy is downloaded into a temporary folder beside it
(`.<name>-download-*`) and renamed into place whole, so concurrent loads on one machine never see half
a folder: a folder there is complete, and the loser of a race drops its own copy for the winner's.

The cache is bounded (issue #22): a long-lived worker serving many adapters would otherwise fill its
disk. Its folders together keep under WEIGHTS_CACHE_MAX_BYTES (0: unbounded), the least recently used
evicted first, before a fetch (to make room for the folder about to come, whose size its manifest
gives) and after it:

- Recency. Each folder has an index entry, weights-cache/.index/<hash of its path>.json (its path and
  size); the entry's modification time is the folder's last use, touched by every local_weights() that
  returns it. The index is also the list of what may be evicted: only complete folders are in it.
- In use. A folder used in the last RECENT_USE_S (10 minutes) is never evicted, nor the folder just
  fetched. That is the whole "in use" rule, and why it is enough: every loader calls local_weights()
  (or model_paths()) right before it opens the files, and on Linux a file once open stays readable
  after its folder is removed (the loaded tensors, or a safetensors mmap, never depend on the name).
  The longest wait between the call and the open is a generation queued in the serving batcher,
  bounded by INFERENCE_TIMEOUT_S (300 s). A loader that opens files later than 10 minutes after asking
  is not protected: it would meet a missing folder and fail, not read half of one. While every folder
  is that recent the cache goes over its limit rather than fail a load; the next fetch evicts again.
- Across processes. weights-cache/.lock is an fcntl lock: a cache hit (the folder's existence and its
  touch) holds it shared, an eviction or the install of a fetched folder exclusively. So no process
  evicts a folder between another's check and touch, and two processes evicting at once do not both
  count the same folder. Evicting renames the folder to `.<name>-evicted-*` under the lock (it is gone
  from its place at once, whole) and deletes it after. Downloads run outside the lock.
- Leftovers. A `.<name>-download-*` folder whose newest file is over an hour old (its process died) and
  any `.<name>-evicted-*` folder are removed at each eviction.

A single model larger than WEIGHTS_CACHE_MAX_BYTES is refused (WeightsUnavailable naming it and the
setting) before anything is downloaded. The cache may still be emptied by hand at any time: what is
missing is fetched again on demand, and an index entry without its folder is dropped.
"""

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from apps.core import storage
from apps.core.errors import Conflict
from apps.registry.models import RegisteredModel

logger = logging.getLogger(__name__)

# A folder used this recently is in use (see the module's docstring): twice INFERENCE_TIMEOUT_S's
# default, the longest a load waits between asking for its folder and opening its files.
RECENT_USE_S = 10 * 60
# A download folder untouched this long belongs to a process that died: a live download writes files
# continuously (boto3's transfers write every few MiB).
STALE_DOWNLOAD_S = 60 * 60
_LEFTOVER = re.compile(r"^\..+-(download|evicted)-[^/]+$")


class WeightsUnavailable(Conflict):
    """A model's weights are neither on this machine nor (intact) in the artifact bucket, or cannot fit
    in this machine's weights cache."""


def merged_prefix(model_id: int) -> str:
    """Where a merged model's weights are kept in the bucket."""
    return f"{settings.ARTIFACT_S3_MODELS_PREFIX}merged-{model_id}/"


def model_paths(model: RegisteredModel) -> tuple[Path, Path | None]:
    """(base weights directory, adapter directory or None), both on this machine."""
    if model.kind == RegisteredModel.Kind.ADAPTER:
        return local_weights(model.base_model), local_weights(model)
    return local_weights(model), None


def local_weights(model: RegisteredModel) -> Path:
    """The directory of `model`'s weights on this machine: `weights_path` where it exists, else the
    bucket's copy, fetched into the local cache (and marked used: kept for RECENT_USE_S at least).
    WeightsUnavailable, naming the model, otherwise."""
    path = Path(model.weights_path) if model.weights_path else None
    if path is not None and path.exists():
        return path
    where = f"not on this machine ({model.weights_path})" if path is not None else "not written yet"
    if not model.bucket_prefix:
        raise WeightsUnavailable(f"The weights of “{model.name}” are {where}, and the artifact bucket has no copy "
                                 "of them.", field="model")
    if not storage.bucket_enabled():
        raise WeightsUnavailable(f"The weights of “{model.name}” are {where}, and no artifact bucket is configured "
                                 f"(ARTIFACT_S3_BUCKET) to fetch them from ({model.bucket_prefix}).", field="model")
    return _cached_folder(model, model.bucket_prefix)


def _cache_root() -> Path:
    return Path(settings.ARTIFACT_ROOT, "weights-cache")


@contextlib.contextmanager
def _cache_lock(*, shared: bool) -> Iterator[None]:
    """The cache's lock across processes (and threads: each call opens its own file description)."""
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _index_entry(relative: str) -> Path:
    return _cache_root() / ".index" / f"{hashlib.sha256(relative.encode()).hexdigest()[:40]}.json"


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _mark_used(relative: str, folder: Path, size: int | None = None) -> None:
    """Touch the folder's index entry (its last use); write the entry where it has none yet, or a
    new size. Under the cache lock, shared or exclusive: writers of one entry write the same."""
    entry = _index_entry(relative)
    if size is None and entry.exists():
        os.utime(entry)
        return
    entry.parent.mkdir(exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=entry.parent, prefix=".entry-")
    with os.fdopen(fd, "w") as handle:
        json.dump({"path": relative, "bytes": _folder_bytes(folder) if size is None else size}, handle)
    os.replace(temp, entry)


def _cached_folder(model: RegisteredModel, prefix: str) -> Path:
    parts = prefix.split("/")[:-1]
    # A name starting with a dot is refused too: those are the cache's own (its index, its lock, folders
    # being downloaded or evicted).
    if not prefix.endswith("/") or not parts or any(part in ("", ".", "..") or part.startswith(".")
                                                    for part in parts):
        raise WeightsUnavailable(f"The bucket location of “{model.name}”'s weights is not a folder: {prefix!r}.",
                                 field="model")
    relative = "/".join(parts)
    target = _cache_root().joinpath(*parts)
    with _cache_lock(shared=True):
        if target.is_dir():
            _mark_used(relative, target)
            return target
    try:
        manifest = storage.folder_manifest(prefix)
    except FileNotFoundError:
        raise WeightsUnavailable(f"The weights of “{model.name}” are not on this machine, and the artifact bucket has "
                                 f"no complete copy of them ({prefix}).", field="model") from None
    except storage.CorruptFolder as exc:
        raise WeightsUnavailable(f"The artifact bucket's copy of “{model.name}”'s weights was refused: {exc}.",
                                 field="model") from None
    size = sum(facts["bytes"] for facts in manifest["files"].values())
    limit = settings.WEIGHTS_CACHE_MAX_BYTES
    if limit and size > limit:
        raise WeightsUnavailable(f"The weights of “{model.name}” ({size:,} bytes) are larger than this machine's "
                                 f"weights cache may hold (WEIGHTS_CACHE_MAX_BYTES = {limit:,} bytes): raise it, or "
                                 "set it to 0 for no limit.", field="model")
    _evict(room_for=size)
    with _cache_lock(shared=True):  # an eviction removes empty folders: this one is not empty once made
        target.parent.mkdir(parents=True, exist_ok=True)
        download = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-download-"))
    try:
        storage.get_folder(prefix, download, manifest=manifest)
    except storage.CorruptFolder as exc:
        shutil.rmtree(download, ignore_errors=True)
        raise WeightsUnavailable(f"The artifact bucket's copy of “{model.name}”'s weights was refused: {exc}.",
                                 field="model") from None
    except BaseException:
        shutil.rmtree(download, ignore_errors=True)
        raise
    with _cache_lock(shared=False):
        try:
            download.rename(target)
        except OSError:  # another load on this machine put its (equally verified) copy there first
            shutil.rmtree(download, ignore_errors=True)
            if not target.is_dir():
                raise
        _mark_used(relative, target, size)
    _evict(room_for=0, keep=relative)
    return target


def _evict(*, room_for: int, keep: str | None = None) -> None:
    """Evict the least recently used folders until the cache's folders and `room_for` more bytes fit
    under WEIGHTS_CACHE_MAX_BYTES; never `keep` nor a folder used in the last RECENT_USE_S. Leftover
    download and eviction folders go too. The folders are renamed away under the lock, deleted after."""
    root = _cache_root()
    limit = settings.WEIGHTS_CACHE_MAX_BYTES
    trash: list[Path] = []
    with _cache_lock(shared=False):
        now = time.time()
        entries = []
        for entry in (root / ".index").glob("*.json"):
            try:
                facts = json.loads(entry.read_text())
                used, relative, size = entry.stat().st_mtime, facts["path"], int(facts["bytes"])
            except (OSError, ValueError, KeyError, TypeError):  # unreadable: its folder stays until used again
                entry.unlink(missing_ok=True)
                continue
            entries.append((used, relative, size, entry))
        trash += _leftovers(root, {relative for _, relative, _, _ in entries}, now)
        for temp in (root / ".index").glob(".entry-*"):  # an entry's writer that died mid-write
            with contextlib.suppress(FileNotFoundError):
                if now - temp.stat().st_mtime > STALE_DOWNLOAD_S:
                    temp.unlink()
        total = room_for + sum(size for _, _, size, _ in entries)
        for used, relative, size, entry in sorted(entries):
            if not limit or total <= limit:
                break
            if relative == keep or now - used < RECENT_USE_S:
                continue
            folder = root.joinpath(*relative.split("/"))
            if folder.is_dir():
                trash.append(folder.with_name(f".{folder.name}-evicted-{uuid.uuid4().hex[:8]}"))
                folder.rename(trash[-1])
            entry.unlink()
            total -= size
            logger.info("weights cache: evicted %s (%d bytes, last used %.0f s ago)", relative, size, now - used)
        if limit and total > limit:
            logger.warning("weights cache: %d bytes with %d more to come, over WEIGHTS_CACHE_MAX_BYTES (%d): the rest "
                           "was used in the last %d s", total - room_for, room_for, limit, RECENT_USE_S)
    for folder in trash:
        shutil.rmtree(folder, ignore_errors=True)
        _remove_empty_parents(folder.parent, root)


def _leftovers(root: Path, cached: set[str], now: float) -> list[Path]:
    """Stale download folders and evicted ones under `root` (cached folders themselves not looked into)."""
    found = []
    for directory, names, _ in os.walk(root):
        relative = Path(directory).relative_to(root).as_posix()
        if relative in cached:
            names.clear()
            continue
        for name in [n for n in names if n.startswith(".")]:
            names.remove(name)
            path = Path(directory, name)
            match = _LEFTOVER.match(name)
            if match and (match.group(1) == "evicted" or now - _newest_change(path) > STALE_DOWNLOAD_S):
                found.append(path)
    return found


def _newest_change(folder: Path) -> float:
    newest = 0.0
    for path in [folder, *folder.rglob("*")]:
        try:
            newest = max(newest, path.stat().st_mtime)
        except FileNotFoundError:
            continue
    return newest


def _remove_empty_parents(folder: Path, root: Path) -> None:
    """Remove `folder` and its parents up to `root` while empty (a fetch makes its own under the lock)."""
    with _cache_lock(shared=False):
        while folder != root and root in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty, or gone
                return
            folder = folder.parent
