"""Where a registered model's weights are on this machine: the one question every loader asks
(serving, comparisons, suggestions, evaluations, classification, exports, merges, fine-tunes).

A fine-tune's adapter, and a model merged from one, are written on the machine that made them and
uploaded to the artifact bucket when one is configured (`RegisteredModel.bucket_prefix`). A worker on
another machine (another ARTIFACT_ROOT) has none of their files: it fetches the bucket's copy once
into ARTIFACT_ROOT/weights-cache/<prefix>, every file checked against the folder's manifest
(apps.core.storage.get_folder). The copy is downloaded into a temporary folder beside it and renamed
into place whole, so concurrent loads on one machine never see half a folder: a folder there is
complete, and the loser of a race drops its own copy for the winner's.
"""

import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from apps.core import storage
from apps.core.errors import Conflict
from apps.registry.models import RegisteredModel


class WeightsUnavailable(Conflict):
    """A model's weights are neither on this machine nor (intact) in the artifact bucket."""


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
    bucket's copy, fetched into the local cache. WeightsUnavailable, naming the model, otherwise."""
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


def _cached_folder(model: RegisteredModel, prefix: str) -> Path:
    parts = prefix.split("/")[:-1]
    if not prefix.endswith("/") or not parts or any(part in ("", ".", "..") for part in parts):
        raise WeightsUnavailable(f"The bucket location of “{model.name}”'s weights is not a folder: {prefix!r}.",
                                 field="model")
    target = Path(settings.ARTIFACT_ROOT, "weights-cache", *parts)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    download = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-download-"))
    try:
        storage.get_folder(prefix, download)
    except FileNotFoundError:
        shutil.rmtree(download, ignore_errors=True)
        raise WeightsUnavailable(f"The weights of “{model.name}” are not on this machine, and the artifact bucket has "
                                 f"no complete copy of them ({prefix}).", field="model") from None
    except storage.CorruptFolder as exc:
        shutil.rmtree(download, ignore_errors=True)
        raise WeightsUnavailable(f"The artifact bucket's copy of “{model.name}”'s weights was refused: {exc}.",
                                 field="model") from None
    except BaseException:
        shutil.rmtree(download, ignore_errors=True)
        raise
    try:
        download.rename(target)
    except OSError:  # another load on this machine put its (equally verified) copy there first
        shutil.rmtree(download, ignore_errors=True)
        if not target.is_dir():
            raise
    return target
