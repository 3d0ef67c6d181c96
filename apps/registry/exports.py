"""Model exports for deployment, run by a worker: the model (an adapter merged into its base
first) written as one file, then loaded back and checked against the model it came from.

- safetensors: the merged model directory, zipped. Loaded back from the directory and compared
  with the served model (base + adapter, unmerged).
- gguf-f16, gguf-q8_0: one GGUF file (workers.models.gguf_export). Loaded back by transformers'
  GGUF loader and compared with the merged model it was written from.
"""

import logging
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from django.conf import settings

from apps.core.jobs import JobRun
from apps.registry.models import ModelExport, RegisteredModel
from apps.registry.weights import model_paths

logger = logging.getLogger(__name__)


def export_folder(job_id: int) -> Path:
    return Path(settings.ARTIFACT_ROOT) / "model-exports" / str(job_id)


def delete_export_files(job_ids: list[int]) -> None:
    """Remove the exports' folders (their files and any unfinished work). A folder that cannot be
    removed is logged, not raised: the deletion that asked for it has already happened."""
    for job_id in job_ids:
        try:
            shutil.rmtree(export_folder(job_id))
        except FileNotFoundError:
            continue  # never written (failed early, or still queued)
        except OSError:
            logger.exception("could not delete the files of model export %s", job_id)


def run_model_export(job_id: int, *, worker: str = "") -> None:
    run = JobRun.claim(ModelExport, job_id, worker=worker, what="export")
    if run is None:
        return  # ended, gone, or written by a live worker (apps.core.jobs.JobRun.claim)
    job = ModelExport.objects.select_related("model__base_model").get(pk=job_id)
    if job.model.deleted_at is not None:
        with run:
            run.fail("The model was deleted before its export started.")
        return
    folder = export_folder(job.pk)
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=folder))
    with run:
        try:
            final, write_seconds, check = _export(job, work, run)
        except Exception as exc:
            logger.exception("model export %s failed", job_id)
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        else:
            run.finish(path=str(final), size_bytes=final.stat().st_size, write_seconds=round(write_seconds, 3),
                       check_result=check)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    # The model (and so its exports) deleted while this one was written: its deletion removed the
    # folder before the file was moved in, or sees deleted_at after it was; either way nothing stays.
    if RegisteredModel.all_objects.filter(pk=job.model_id, deleted_at__isnull=False).exists():
        delete_export_files([job.pk])


def _export(job: ModelExport, work: Path, run: JobRun) -> tuple[Path, float, dict]:
    """Write the job's file into its folder; returns (the file, seconds to write it, the check)."""
    from workers.models import load_for_inference
    from workers.models.export_check import compare_greedy, load_gguf_back
    from workers.models.gguf_export import write_gguf
    from workers.models.merge import merge_adapter

    model = job.model
    steps = 3  # merge (or take the base), write, check
    run.progress(0, steps)
    started = time.monotonic()
    base, adapter = model_paths(model)  # from the artifact bucket on a machine without them
    source = merge_adapter(base, adapter, work / "merged") if adapter is not None else base
    run.progress(1, steps)
    final = export_folder(job.pk) / job.filename
    if job.format == ModelExport.Format.SAFETENSORS:
        _zip_directory(source, work / job.filename)
        write_seconds = time.monotonic() - started
        run.progress(2, steps)
        exported, tokenizer = load_for_inference(source, dtype="fp32")
        reference = _served_model(base, adapter)
    else:
        written = write_gguf(source, work / job.filename, job.format.removeprefix("gguf-"), name=model.name)
        write_seconds = time.monotonic() - started
        run.progress(2, steps)
        exported = load_gguf_back(written.path)
        reference, tokenizer = load_for_inference(source, dtype="fp32")
    check = compare_greedy(exported, reference, tokenizer)
    check["method"] = ("loaded back by transformers' GGUF loader, compared with the merged model"
                       if job.format != ModelExport.Format.SAFETENSORS
                       else "loaded back from safetensors, compared with the served model")
    (work / job.filename).rename(final)
    run.progress(3, steps)
    return final, write_seconds, check


def _served_model(base: Path, adapter: Path | None):
    """What serving runs for this model: the base with the adapter beside it (PEFT, unmerged)."""
    from workers.models import load_for_inference

    if adapter is None:
        return load_for_inference(base, dtype="fp32")[0]
    from peft import PeftModel

    loaded, _ = load_for_inference(base, dtype="fp32")
    return PeftModel.from_pretrained(loaded, str(adapter), is_trainable=False).eval()


def _zip_directory(directory: Path, target: Path) -> None:
    """The model's files (not the workbench markers) under one folder; stored, as safetensors barely compress."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED, allowZip64=True) as zipped:
        for path in sorted(directory.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                zipped.write(path, f"{target.stem}/{path.name}")
