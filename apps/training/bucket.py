"""A fine-tune's checkpoints and final adapter in the artifact bucket (ARTIFACT_S3_BUCKET), so that a job
whose worker's machine is lost resumes on another machine, which has none of its files.

Layout, under <ARTIFACT_S3_TRAINING_PREFIX>job-<id>/: checkpoints/step-<N>/ (one per checkpoint the engine
reports, the newest KEEP kept, like the local folder) and adapter/. Each is an apps.core.storage folder:
its files, then its manifest last; a reader trusts only folders with a manifest and checks every file.

A worker that claims a job whose local folder has no checkpoint as new as the job's row says
(`checkpoint_step`, written once a checkpoint is uploaded) puts the newest complete one of the bucket,
up to that step, in place before training resumes. Checkpoints above it in the bucket are not trusted:
an upload whose step the row never recorded, or another database's job of the same id.
"""

import logging
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from apps.core import storage
from workers.training.checkpoint import KEEP, complete_steps, install_checkpoint

logger = logging.getLogger(__name__)

_STEP = "step-"


def job_prefix(job_id: int) -> str:
    return f"{settings.ARTIFACT_S3_TRAINING_PREFIX}job-{job_id}/"


def checkpoint_prefix(job_id: int, step: int) -> str:
    return f"{job_prefix(job_id)}checkpoints/{_STEP}{step}/"


def adapter_prefix(job_id: int) -> str:
    return f"{job_prefix(job_id)}adapter/"


def bucket_checkpoints(job_id: int) -> dict[int, bool]:
    """The job's checkpoint folders in the bucket: step -> whether it is complete (has its manifest)."""
    steps = {}
    for name, complete in storage.folder_names(f"{job_prefix(job_id)}checkpoints/").items():
        number = name[len(_STEP):]
        if name.startswith(_STEP) and number.isdigit():
            steps[int(number)] = complete
    return steps


def upload_checkpoint(job_id: int, step: int, path: Path) -> None:
    """Upload the checkpoint directory `path` of `step`, then prune: the newest KEEP complete ones up to
    this step stay; every folder below them goes, incomplete ones (a killed upload) included."""
    storage.put_folder(path, checkpoint_prefix(job_id, step))
    steps = bucket_checkpoints(job_id)
    kept = sorted(number for number, complete in steps.items() if complete and number <= step)[-KEEP:]
    for number in steps:
        if number < kept[0]:
            storage.delete_folder(checkpoint_prefix(job_id, number))


def upload_adapter(job_id: int, adapter_dir: Path) -> str:
    """Upload the job's final adapter; returns its prefix (the registered adapter's `bucket_prefix`)."""
    storage.put_folder(adapter_dir, adapter_prefix(job_id))
    return adapter_prefix(job_id)


def fetch_checkpoint(job_id: int, checkpoints_dir: Path, *, up_to_step: int, log: Callable[[str], None]) -> int | None:
    """Put the newest complete checkpoint of the bucket, at most `up_to_step`, into `checkpoints_dir`
    (workers.training.checkpoint.install_checkpoint) when the folder has none as new. A damaged one is
    skipped for the next older, and said in `log`. Returns the step put in place, or None."""
    local = complete_steps(checkpoints_dir)
    newer = sorted((number for number, complete in bucket_checkpoints(job_id).items()
                    if complete and (local[-1] if local else 0) < number <= up_to_step), reverse=True)
    for step in newer:
        def fill(directory: Path, prefix: str = checkpoint_prefix(job_id, step)) -> None:
            storage.get_folder(prefix, directory)

        try:
            install_checkpoint(checkpoints_dir, step, fill)
        except (storage.CorruptFolder, FileNotFoundError, ValueError) as exc:
            logger.warning("job %s: the checkpoint at step %s in the bucket was skipped: %s", job_id, step, exc)
            log(f"the checkpoint at step {step} in the bucket was skipped: {exc}")
            continue
        return step
    return None
