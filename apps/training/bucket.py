"""A fine-tune's checkpoints and final adapter in the artifact bucket (ARTIFACT_S3_BUCKET), so that a job
whose worker's machine is lost resumes on another machine, which has none of its files.

Layout, under <ARTIFACT_S3_TRAINING_PREFIX>job-<id>/: checkpoints/step-<N>-r<R>/ (one per checkpoint the
engine reports, the newest KEEP of a claim kept, like the local folder) and adapter-r<R>/. Each is an
apps.core.storage folder: its files, then its manifest last; a reader trusts only folders with a manifest
and checks every file.

R is the fencing token: the job row's `runs` when the writing worker claimed it (apps.core.jobs). A
worker that lost its lease (its heartbeat went stale in a long pause or a network partition, and another
worker took the job over) may still be running: its folders carry its older R, so it never overwrites the
new owner's, and the runner stops it at its first refused row write (apps.training.runner). The row
records the claim of its checkpoint (`checkpoint_run`) with the step, in one write that only the current
claim can make; readers trust only that claim's folders, and pruning never touches a newer claim's.
Folders written before the tag (`step-<N>/`, `adapter/`) are claim 0: a job recorded then resumes from them.

A worker that claims a job whose local folder has no checkpoint as new as the job's row says
(`checkpoint_step`, written once a checkpoint is uploaded) puts the newest complete one of the row's
claim in the bucket, up to that step, in place before training resumes. Checkpoints above it are not
trusted: an upload whose step the row never recorded, or another database's job of the same id.
"""

import logging
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from apps.core import storage
from workers.training.checkpoint import KEEP, complete_steps, install_checkpoint

logger = logging.getLogger(__name__)

_STEP = "step-"
_RUN = "-r"


def job_prefix(job_id: int) -> str:
    return f"{settings.ARTIFACT_S3_TRAINING_PREFIX}job-{job_id}/"


def _tag(run: int) -> str:
    return f"{_RUN}{run}" if run else ""


def checkpoint_prefix(job_id: int, step: int, run: int) -> str:
    """The folder of the checkpoint at `step` written by the claim `run` (0: an untagged, older one)."""
    return f"{job_prefix(job_id)}checkpoints/{_STEP}{step}{_tag(run)}/"


def adapter_prefix(job_id: int, run: int) -> str:
    """The folder of the final adapter written by the claim `run` (0: an untagged, older one)."""
    return f"{job_prefix(job_id)}adapter{_tag(run)}/"


def _step_and_run(name: str) -> tuple[int, int] | None:
    """(step, run) of a checkpoint folder's name, `step-<N>` (run 0) or `step-<N>-r<R>`; None for others."""
    if not name.startswith(_STEP):
        return None
    step, tagged, run = name[len(_STEP):].partition(_RUN)
    if not step.isdigit() or (tagged and not run.isdigit()) or (tagged and int(run) == 0):
        return None
    return int(step), int(run) if tagged else 0


def bucket_checkpoints(job_id: int) -> dict[tuple[int, int], bool]:
    """The job's checkpoint folders in the bucket: (step, run) -> whether it is complete (has its manifest)."""
    found = {}
    for name, complete in storage.folder_names(f"{job_prefix(job_id)}checkpoints/").items():
        if (key := _step_and_run(name)) is not None:
            found[key] = complete
    return found


def upload_checkpoint(job_id: int, step: int, run: int, path: Path) -> str:
    """Upload the checkpoint directory `path` of `step` under the claim `run`'s tag; returns its prefix.
    The caller records it on the job's row (only while `run` is still the row's claim), then prunes
    (prune_checkpoints)."""
    storage.put_folder(path, checkpoint_prefix(job_id, step, run))
    return checkpoint_prefix(job_id, step, run)


def prune_checkpoints(job_id: int, step: int, run: int) -> None:
    """Once the row records the claim `run`'s checkpoint at `step`: the newest KEEP complete ones of that
    claim up to `step` stay; its folders below them go (incomplete ones, a killed upload, included), and so
    do older claims' folders up to `step` (the row no longer points to them). A newer claim's folders
    (the job's owner, should this worker have lost it meanwhile) and folders above `step` (another
    database's job of this id) are never touched."""
    found = bucket_checkpoints(job_id)
    kept = sorted(s for (s, r), complete in found.items() if r == run and complete and s <= step)[-KEEP:]
    if not kept:  # its upload failed: what was there stays
        return
    for s, r in found:
        if (r == run and s < kept[0]) or (r < run and s <= step):
            storage.delete_folder(checkpoint_prefix(job_id, s, r))


def delete_checkpoint(job_id: int, step: int, run: int) -> None:
    """Remove a folder the row will never point to: the upload of a claim that had lost the job."""
    storage.delete_folder(checkpoint_prefix(job_id, step, run))


def upload_adapter(job_id: int, run: int, adapter_dir: Path) -> str:
    """Upload the job's final adapter under the claim `run`'s tag; returns its prefix (the registered
    adapter's `bucket_prefix`)."""
    storage.put_folder(adapter_dir, adapter_prefix(job_id, run))
    return adapter_prefix(job_id, run)


def fetch_checkpoint(job_id: int, checkpoints_dir: Path, *, up_to_step: int, run: int,
                     log: Callable[[str], None]) -> int | None:
    """Put the newest complete checkpoint of the claim `run` (the one the row recorded, 0 for untagged
    folders) in the bucket, at most `up_to_step`, into `checkpoints_dir`
    (workers.training.checkpoint.install_checkpoint) when the folder has none as new. A damaged one is
    skipped for the next older, and said in `log`. Returns the step put in place, or None."""
    local = complete_steps(checkpoints_dir)
    newer = sorted((s for (s, r), complete in bucket_checkpoints(job_id).items()
                    if r == run and complete and (local[-1] if local else 0) < s <= up_to_step), reverse=True)
    for step in newer:
        def fill(directory: Path, prefix: str = checkpoint_prefix(job_id, step, run)) -> None:
            storage.get_folder(prefix, directory)

        try:
            install_checkpoint(checkpoints_dir, step, fill)
        except (storage.CorruptFolder, FileNotFoundError, ValueError) as exc:
            logger.warning("job %s: the checkpoint at step %s in the bucket was skipped: %s", job_id, step, exc)
            log(f"the checkpoint at step {step} in the bucket was skipped: {exc}")
            continue
        return step
    return None
