"""Registering models: path checks here; inspection (metadata only, nothing loaded, no code
run) and the conversion of GGUF files in a worker."""

import logging
import os
import re
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.core import storage
from apps.core.errors import Conflict, Invalid, NotFound
from apps.core.jobs import enqueue
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Project
from apps.registry import uploads, weights
from apps.registry.exports import delete_export_files
from apps.registry.models import ALIAS_NAME, CatalogueModel, ModelAlias, ModelExport, RegisteredModel
from apps.registry.tasks import (
    convert_model_task,
    export_model_task,
    inspect_model_task,
    merge_adapter_task,
    prepare_catalogue_task,
)

logger = logging.getLogger(__name__)


def model_register(*, user, project: Project, name: str, path: str = "", hub_id: str = "", revision: str = "",
                   token=None, ip_address: str | None = None) -> RegisteredModel:
    """Register a safetensors directory or a GGUF file found inside the model roots, or a hub id
    (`org/name`) from the local Hugging Face cache.

    The request checks only what costs nothing: the path (inside the roots, symlinks resolved)
    and its shape (a directory or a .gguf file, not pickle checkpoints). The model is CHECKING
    until a worker has read its headers (`run_inspection`): a header can be made as large as an
    attacker likes, and parsing it in the web process would stall every other request.
    Refused with a clear reason (and nothing registered): a path outside the roots or through a
    symlink out of them, pickle-only checkpoints, a hub id not in the cache while downloads are off.
    """
    policy.require(user, "model.register", project, token)
    name = _model_name(name)
    if project.models.filter(name__iexact=name).exists():
        raise Invalid(f"This project already has a model called “{name}”.", field="name")
    resolved, model_type = _resolve_source(path, hub_id, revision)
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(
                project=project, name=name, format=model_type, source_path=str(resolved),
                status=RegisteredModel.Status.CHECKING, created_by=user)
            audit_record(actor=user, action="model.register", project=project, target=model, ip_address=ip_address,
                         after={"name": name, "path": str(resolved), "format": model_type})
            transaction.on_commit(lambda: _enqueue_inspection(model.pk))
    except IntegrityError:
        raise Invalid(f"This project already has a model called “{name}”.", field="name") from None
    return model


def _model_name(name: str) -> str:
    name = " ".join((name or "").split())
    if not name or len(name) > 120:
        raise Invalid("A model needs a name of at most 120 characters.", field="name")
    if "@" in name:  # `name@alias` is how clients ask for an alias
        raise Invalid("A model name cannot hold “@”: clients ask for aliases as name@alias.", field="name")
    return name


def _resolve_source(path: str, hub_id: str, revision: str) -> tuple[Path, str]:
    """(the checked path, its format) of a model to register: a path inside the model roots or a
    hub id from the local Hugging Face cache; Invalid naming the field otherwise."""
    from workers.models import ModelSafetyError, model_format, resolve_model_path

    roots = model_roots()
    field = "path"
    if hub_id:
        if path:
            raise Invalid("Give a path or a hub id, not both.", field="hub_id")
        path, field = str(_hub_snapshot(hub_id, revision or "main")), "hub_id"
    try:
        resolved = resolve_model_path(path or "", [*roots, settings.HF_HUB_CACHE] if hub_id else roots)
        return resolved, model_format(resolved)
    except ModelSafetyError as exc:
        raise Invalid(str(exc), field=field) from None


def model_roots() -> list[Path]:
    """Where models may be registered from: the configured roots and the folder of the demo
    model's wheel (one GGUF file, installed with the product)."""
    from workers.models import DemoModelMissing, demo_model_gguf

    try:
        demo = [demo_model_gguf().parent]
    except DemoModelMissing:
        demo = []
    return [*settings.MODEL_ROOTS, *demo]


def _enqueue_inspection(model_id: int) -> None:
    enqueue(inspect_model_task, model_id, queue="default", on_failure=lambda reason: RegisteredModel.objects.filter(
        pk=model_id).update(status=RegisteredModel.Status.FAILED, error=reason))


def run_inspection(model_id: int, *, catalogue: bool = False) -> None:
    """In a worker: read a registered model's metadata (config, safetensors or GGUF headers; no
    weights, no code), then make it READY, or CONVERTING for a GGUF file (converted here too),
    or FAILED with the reason a person can act on."""
    from workers.models import ModelSafetyError, inspect_model, resolve_model_path

    model = (CatalogueModel if catalogue else RegisteredModel).objects.filter(pk=model_id).first()
    if model is None or model.status != RegisteredModel.Status.CHECKING:
        return  # deleted, or already inspected: a redelivered message does nothing
    # Checked again: the path may have changed since it was registered. Files inside a directory
    # may link only into the roots (a Hugging Face snapshot links to its cache's blobs).
    roots = [*model_roots(), settings.HF_HUB_CACHE, *([uploads.upload_root()] if catalogue else [])]
    try:
        source = resolve_model_path(model.source_path, roots)
        info = inspect_model(source, roots=roots)
    except ModelSafetyError as exc:
        _leave_state(model, RegisteredModel.Status.CHECKING, status=RegisteredModel.Status.FAILED,
                     error=str(exc)[:2000])
        return
    is_gguf = info.format == "gguf"
    status = RegisteredModel.Status.CONVERTING if is_gguf else _loaded_or_failed(model, source)
    if not _leave_state(model, RegisteredModel.Status.CHECKING, info=info.as_dict(), format=info.format,
                        status=status, weights_path="" if is_gguf else str(source), error=model.error):
        return
    if is_gguf:
        run_conversion(model.pk, catalogue=catalogue)


HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
# What a download may fetch: weights as safetensors, configs, tokenizer files; never pickles or code.
HUB_FILES = ["*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json", "tokenizer*",
             "special_tokens_map.json", "chat_template.jinja", "*.model", "vocab.*", "merges.txt", "LICENSE*",
             "README.md"]


def _hub_snapshot(hub_id: str, revision: str) -> Path:
    """The local snapshot directory of a hub model, from the Hugging Face cache (downloaded
    first only when MODEL_HUB_DOWNLOADS is on)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if not HUB_ID.match(hub_id) or ".." in hub_id:
        raise Invalid("A hub id looks like org/name (letters, digits, . _ -).", field="hub_id")
    if not REVISION.match(revision) or ".." in revision:
        raise Invalid("A revision is a branch, tag or commit name.", field="revision")
    try:
        return Path(snapshot_download(hub_id, revision=revision, cache_dir=settings.HF_HUB_CACHE,
                                      local_files_only=not settings.MODEL_HUB_DOWNLOADS, allow_patterns=HUB_FILES))
    except LocalEntryNotFoundError:
        raise Invalid(f"{hub_id} ({revision}) is not in this server's Hugging Face cache, and downloads are off "
                      "(MODEL_HUB_DOWNLOADS).", field="hub_id") from None
    except (HfHubHTTPError, OSError) as exc:
        raise Invalid(f"{hub_id} could not be fetched: {type(exc).__name__}.", field="hub_id") from None


def _enqueue_conversion(model_id: int) -> None:
    enqueue(convert_model_task, model_id, queue="default", on_failure=lambda reason: RegisteredModel.objects.filter(
        pk=model_id).update(status=RegisteredModel.Status.FAILED, error=reason))


def registration_resume(model: RegisteredModel) -> None:
    """Queue again the inspection or conversion of a model still waiting for it (its worker
    stopped mid-way); a late duplicate message does nothing."""
    if isinstance(model, CatalogueModel):
        if model.status in (RegisteredModel.Status.CHECKING, RegisteredModel.Status.CONVERTING):
            _enqueue_catalogue_preparation(model.pk)
        return
    if model.status == RegisteredModel.Status.CHECKING:
        _enqueue_inspection(model.pk)
    elif model.status == RegisteredModel.Status.CONVERTING and model.format == RegisteredModel.Format.GGUF:
        _enqueue_conversion(model.pk)


def conversion_dir(model: RegisteredModel) -> Path:
    """Where a GGUF file's safetensors conversion is cached: by source path and size, so the
    same file registered twice (in two projects) is converted once."""
    import hashlib

    source = Path(model.source_path)
    key = hashlib.sha256(f"{source}:{source.stat().st_size}".encode()).hexdigest()[:24]
    return Path(settings.ARTIFACT_ROOT) / "models" / key


def run_conversion(model_id: int, *, catalogue: bool = False) -> None:
    """In a worker: convert a registered GGUF file once into a safetensors directory."""
    from workers.models import convert_gguf_to_safetensors

    model = (CatalogueModel if catalogue else RegisteredModel).objects.filter(pk=model_id).first()
    if model is None or model.status != RegisteredModel.Status.CONVERTING:
        return  # deleted, or already done: a redelivered message does nothing
    try:
        out = convert_gguf_to_safetensors(Path(model.source_path), conversion_dir(model))
    except Exception as exc:  # the scientist sees the reason on the model page
        _leave_state(model, RegisteredModel.Status.CONVERTING, status=RegisteredModel.Status.FAILED,
                     error=f"{type(exc).__name__}: {exc}")
        return
    model.error = ""
    status = _loaded_or_failed(model, out)
    _leave_state(model, RegisteredModel.Status.CONVERTING, status=status, weights_path=str(out), error=model.error)


def _leave_state(model, state: str, **fields) -> bool:
    """Write a worker's result only if the model is still in `state`: a redelivered message
    running beside the first must not overwrite its verdict (a failed check discards the upload,
    so the second would report the files as missing). Whether this run's result stands."""
    if not type(model).objects.filter(pk=model.pk, status=state).update(**fields):
        return False
    for field, value in fields.items():
        setattr(model, field, value)
    _sync_if_catalogue(model)
    return True


def _loaded_or_failed(model, weights: Path) -> str:
    """READY, or FAILED with the reason on `model`: an uploaded catalogue model is loaded once (and
    one token generated) before any project is offered it; every other model is READY."""
    from workers.models.loading import check_loads

    if not (isinstance(model, CatalogueModel) and uploads.is_uploaded(model.source_path)):
        return RegisteredModel.Status.READY
    try:
        check_loads(weights, roots=[uploads.upload_root(), settings.ARTIFACT_ROOT])
    except Exception as exc:  # whatever broken weights make transformers raise: the admin reads why
        model.error = f"The model did not load: {type(exc).__name__}: {exc}"[:2000]
        return RegisteredModel.Status.FAILED
    return RegisteredModel.Status.READY


def adapter_merge(*, user, adapter: RegisteredModel, name: str, token=None,
                  ip_address: str | None = None) -> RegisteredModel:
    """Queue the merge of an adapter into its base: a new standalone base model (safetensors),
    CONVERTING until a worker has written it, with the adapter's lineage and `merged_from`."""
    policy.require(user, "model.register", adapter.project, token)
    if adapter.kind != RegisteredModel.Kind.ADAPTER:
        raise Invalid("Only an adapter can be merged into its base model.", field="model")
    if adapter.status != RegisteredModel.Status.READY or adapter.base_model.status != RegisteredModel.Status.READY:
        raise Invalid("The adapter and its base model must be ready.", field="model")
    name = _model_name(" ".join((name or "").split()) or f"{adapter.name} (merged)"[:120].replace("@", " "))
    if adapter.project.models.filter(name__iexact=name).exists():
        raise Invalid(f"This project already has a model called “{name}”.", field="name")
    with transaction.atomic():
        model = RegisteredModel.objects.create(
            project=adapter.project, name=name, format=RegisteredModel.Format.HF_DIR, kind=RegisteredModel.Kind.BASE,
            source_path=adapter.weights_path, weights_path="", status=RegisteredModel.Status.CONVERTING,
            info=adapter.base_model.info, created_by=user,
            lineage={**adapter.lineage, "merged_from": adapter.pk, "merged_from_name": adapter.name,
                     "base_model": adapter.base_model_id})
        audit_record(actor=user, action="model.merge", project=adapter.project, target=model, ip_address=ip_address,
                     after={"adapter": adapter.pk, "base_model": adapter.base_model_id, "name": name})
        transaction.on_commit(lambda: _enqueue_merge(model.pk))
    return model


def _enqueue_merge(model_id: int) -> None:
    enqueue(merge_adapter_task, model_id, queue="default", on_failure=lambda reason: RegisteredModel.objects.filter(
        pk=model_id).update(status=RegisteredModel.Status.FAILED, error=reason))


def run_merge(model_id: int) -> None:
    """In a worker: write a merged model's weights once, then inspect them like any registration."""
    from workers.models import inspect_model
    from workers.models.merge import merge_adapter

    model = RegisteredModel.objects.filter(pk=model_id).first()
    if model is None or model.status != RegisteredModel.Status.CONVERTING:
        return  # deleted, or already done: a redelivered message does nothing
    adapter = RegisteredModel.all_objects.select_related("base_model").get(pk=model.lineage["merged_from"])
    try:
        out = merge_adapter(*weights.model_paths(adapter), Path(settings.ARTIFACT_ROOT) / "models" / f"merged-{model.pk}")
        info = inspect_model(out)
    except weights.WeightsUnavailable as exc:
        model.status, model.error = RegisteredModel.Status.FAILED, exc.message
        model.save(update_fields=["status", "error"])
        return
    except Exception as exc:  # the scientist sees the reason on the model page
        model.status, model.error = RegisteredModel.Status.FAILED, f"{type(exc).__name__}: {exc}"[:2000]
        model.save(update_fields=["status", "error"])
        return
    model.status, model.weights_path, model.info, model.error = RegisteredModel.Status.READY, str(out), \
        info.as_dict(), ""
    model.bucket_prefix = _upload_merged(model.pk, out)
    model.save(update_fields=["status", "weights_path", "info", "error", "bucket_prefix"])


def _upload_merged(model_id: int, directory: Path) -> str:
    """The merged model's folder in the artifact bucket, for workers on other machines: its prefix, or ""
    without a bucket or when the upload failed (logged: the model is then on this machine only)."""
    if not storage.bucket_enabled():
        return ""
    prefix = weights.merged_prefix(model_id)
    try:
        storage.put_folder(directory, prefix)
    except Exception:
        logger.exception("uploading merged model %s to the artifact bucket failed: it is on this machine only",
                         model_id)
        return ""
    return prefix


def model_export_start(*, user, model: RegisteredModel, export_format: str, token=None,
                       ip_address: str | None = None) -> ModelExport:
    """Queue a worker job that writes the model (an adapter merged into its base) as one file for
    deployment: a zipped safetensors directory, or GGUF in f16 or q8_0 for llama.cpp and Ollama;
    the worker then loads it back and compares its greedy outputs (apps.registry.exports)."""
    policy.require(user, "model.download", model, token)  # the weights leave with it
    if export_format not in ModelExport.Format.values:
        raise Invalid(f"The format is one of {', '.join(ModelExport.Format.values)}.", field="format")
    if model.status != RegisteredModel.Status.READY or (model.base_model_id and
                                                        model.base_model.status != RegisteredModel.Status.READY):
        raise Invalid(f"The model “{model.name}” is {model.status}; export it once it is ready.", field="model")
    model_type = (model.info or {}).get("model_type")
    if export_format != ModelExport.Format.SAFETENSORS and model_type != "llama":
        raise Invalid(f"GGUF export writes Llama-architecture models; “{model.name}” is "
                      f"{model_type or 'of an unknown architecture'}. Export it as safetensors instead.",
                      field="format")
    with transaction.atomic():
        job = ModelExport.objects.create(model=model, format=export_format, created_by=user)
        audit_record(actor=user, action="model.export", project=model.project, target=model, ip_address=ip_address,
                     after={"format": export_format, "job": job.pk})
        transaction.on_commit(lambda: _enqueue_model_export(job.pk))
    return job


def _enqueue_model_export(job_id: int) -> None:
    enqueue(export_model_task, job_id, queue=ModelExport.QUEUE, on_failure=lambda reason: ModelExport.objects.filter(
        pk=job_id).update(state=ModelExport.State.FAILED, finished_at=timezone.now(), error=reason))


@transaction.atomic
def model_export_delete(*, user, export: ModelExport, token=None, ip_address: str | None = None) -> None:
    """Delete a finished export, its file with it (once this commits). A queued or running one is
    refused: its worker would write the file after the folder was removed."""
    policy.require(user, "model.download", export.model, token)
    export = ModelExport.objects.select_for_update().get(pk=export.pk)
    if export.state not in ModelExport.ENDED:
        raise Conflict(f"This export is {export.state}; delete it once it has ended.", field="state")
    audit_record(actor=user, action="model.export_delete", project=export.model.project, target=export.model,
                 ip_address=ip_address, before={"export": export.pk, "format": export.format, "path": export.path})
    export_id = export.pk
    export.delete()
    transaction.on_commit(lambda: delete_export_files([export_id]))


@transaction.atomic
def model_delete(*, user, model: RegisteredModel, token=None, ip_address: str | None = None) -> None:
    """Soft delete: later adapters and jobs keep pointing at it."""
    policy.require(user, "model.delete", model, token)
    _refuse_if_aliased(model)
    audit_record(actor=user, action="model.delete", project=model.project, target=model, ip_address=ip_address,
                 before={"name": model.name})
    _soft_delete(model)


def model_memory_estimate(*, model: RegisteredModel, precision: str, batch_size: int, seq_len: int, lora_rank: int,
                          mode: str, lora_parameters: int | None = None, quantization: str = "none") -> dict:
    from workers.models import ModelInfo, memory_estimate

    if not model.info:
        raise Invalid(f"The model “{model.name}” is {model.status}: its shapes are not known yet.", field="model")
    if precision not in ("bf16", "fp16", "fp32"):
        raise Invalid("precision is bf16, fp16 or fp32.", field="precision")
    if mode not in ("inference", "lora"):
        raise Invalid("mode is inference or lora.", field="mode")
    for field, value, top in (("batch_size", batch_size, 4096), ("seq_len", seq_len, 1_000_000),
                              ("lora_rank", lora_rank, 1024)):
        if not 1 <= value <= top:
            raise Invalid(f"{field} is between 1 and {top}.", field=field)
    return memory_estimate(ModelInfo(**model.info), precision=precision, batch_size=batch_size, seq_len=seq_len,
                           lora_rank=lora_rank, mode=mode, lora_parameters=lora_parameters,
                           quantization=quantization)


def model_content_hash(model: RegisteredModel) -> str:
    """In a worker: the content hash of a READY model's weights, computed once and stored."""
    from workers.models import weights_content_hash

    if not model.content_hash:
        model.content_hash = weights_content_hash(weights.local_weights(model))
        RegisteredModel.all_objects.filter(pk=model.pk).update(content_hash=model.content_hash)
        if model.catalogue_id:  # the same weights in every project that enabled it
            CatalogueModel.objects.filter(pk=model.catalogue_id).update(content_hash=model.content_hash)
            RegisteredModel.all_objects.filter(catalogue_id=model.catalogue_id).update(content_hash=model.content_hash)
    return model.content_hash


def adapter_lineage(job) -> dict:
    """In a worker, before a fine-tune: what its adapter is made of, as the engine writes it into the
    adapter's model card and workbench_train_config.json (workers.training.card)."""
    base, version = job.base_model, job.dataset_version
    return {"base_model": {"name": base.name, "content_hash": model_content_hash(base)},
            "dataset": {"name": version.dataset.name, "version": version.number,
                        "content_hash": version.content_hash},
            "job": {"id": job.pk, "name": job.name}, "method": job.method,
            "train_split": job.train_split, "eval_split": job.eval_split}


def adapter_register(*, job, adapter_dir: Path, metrics: dict, bucket_prefix: str = "") -> RegisteredModel:
    """In a worker, when a fine-tune succeeds: its adapter becomes a model version of the
    project, on top of the job's base model, with the lineage needed to reproduce it and the
    adapter's own facts (PEFT type, rank, target modules, trainable parameters). `bucket_prefix`:
    where the artifact bucket holds its uploaded copy, if it does."""
    import json

    base = job.base_model
    name = f"{job.name} (job {job.pk})"[:120]
    version = job.dataset_version
    peft = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    targets = peft.get("target_modules")
    adapter_facts = {"peft_type": peft.get("peft_type"), "r": peft.get("r"), "lora_alpha": peft.get("lora_alpha"),
                     "target_modules": sorted(targets) if isinstance(targets, list) else targets,
                     "trainable_parameters": (job.info or {}).get("trainable_params")}
    adapter = RegisteredModel.objects.create(
        project=job.project, name=name, format=RegisteredModel.Format.PEFT, kind=RegisteredModel.Kind.ADAPTER,
        base_model=base, source_path=str(adapter_dir), weights_path=str(adapter_dir), bucket_prefix=bucket_prefix,
        status=RegisteredModel.Status.READY, info=base.info, created_by=job.created_by,
        lineage={"job": job.pk, "job_name": job.name, "method": job.method, "base_model": base.pk,
                 "base_model_name": base.name, "base_model_content_hash": model_content_hash(base),
                 "dataset": version.dataset_id, "dataset_name": version.dataset.name,
                 "dataset_version": version.pk, "dataset_version_number": version.number,
                 "content_hash": version.content_hash, "train_split": job.train_split, "eval_split": job.eval_split,
                 "adapter": adapter_facts, "config": job.config, "metrics": metrics})
    audit_record(actor=None, action="model.adapter_register", project=job.project, target=adapter,
                 after={"job": job.pk, "base_model": base.pk, "content_hash": version.content_hash})
    return adapter


def adapter_archive_files(model: RegisteredModel) -> list[tuple[Path, str]]:
    """(file on disk, name in the zip) for an adapter's download: the PEFT directory as
    `PeftModel.from_pretrained` reads it, plus its training config."""
    if model.kind != RegisteredModel.Kind.ADAPTER:
        raise Invalid("Only adapters are downloaded; a base model stays where it was registered.", field="model")
    directory = weights.local_weights(model)
    folder = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in model.name).strip("-") or "adapter"
    return [(path, f"{folder}/{path.relative_to(directory)}") for path in sorted(directory.rglob("*"))
            if path.is_file() and not path.is_symlink()]


# --- the site's catalogue ------------------------------------------------------------------------

def require_site_staff(user, token=None) -> None:
    """Site admins (staff, signed in: an API token carries project permissions only) manage the
    catalogue; anyone else is told nothing exists."""
    if token is not None or not (user is not None and user.is_authenticated and user.is_active and user.is_staff):
        raise NotFound()


CATALOGUE_FIELDS = ("format", "source_path", "weights_path", "status", "info", "content_hash", "error")


def catalogue_register(*, user, name: str, path: str = "", hub_id: str = "", revision: str = "",
                       default_enabled: bool = False, token=None, ip_address: str | None = None) -> CatalogueModel:
    """A site admin registers a base model once for every project: checked like a project's
    registration (`model_register`), then inspected (and a GGUF converted) once by a worker."""
    require_site_staff(user, token)
    return catalogue_add(actor=user, name=name, path=path, hub_id=hub_id, revision=revision,
                         default_enabled=default_enabled, ip_address=ip_address)


def catalogue_add(*, actor, name: str, path: str = "", hub_id: str = "", revision: str = "",
                  default_enabled: bool = False, ip_address: str | None = None) -> CatalogueModel:
    """`catalogue_register` without the site admin check: for the start command (the demo model)."""
    name = _model_name(name)
    if CatalogueModel.objects.filter(name__iexact=name).exists():
        raise Invalid(f"The catalogue already has a model called “{name}”.", field="name")
    resolved, model_type = _resolve_source(path, hub_id, revision)
    try:
        with transaction.atomic():
            entry = CatalogueModel.objects.create(name=name, format=model_type, source_path=str(resolved),
                                                  status=RegisteredModel.Status.CHECKING,
                                                  default_enabled=bool(default_enabled),
                                                  created_by=actor if getattr(actor, "pk", None) else None)
            audit_record(actor=actor, action="catalogue.register", target=entry, ip_address=ip_address,
                         after={"name": name, "path": str(resolved), "format": model_type,
                                "default_enabled": entry.default_enabled})
            transaction.on_commit(lambda: _enqueue_catalogue_preparation(entry.pk))
    except IntegrityError:
        raise Invalid(f"The catalogue already has a model called “{name}”.", field="name") from None
    return entry


def catalogue_upload(*, user, name: str, files: list, default_enabled: bool = False, token=None,
                     ip_address: str | None = None) -> CatalogueModel:
    """A site admin uploads a base model into the catalogue: safetensors weights with config and
    tokenizer files, or one GGUF file (apps.registry.uploads). The files are written whole or not at
    all; the entry is CHECKING until a worker has read their headers and loaded the model
    (`run_catalogue_preparation`), then READY, or FAILED with the reason and the files removed."""
    require_site_staff(user, token)
    name = _model_name(name)
    if CatalogueModel.objects.filter(name__iexact=name).exists():
        raise Invalid(f"The catalogue already has a model called “{name}”.", field="name")
    model_format = uploads.check_files(files)
    source = uploads.store_files(files, model_format)
    try:
        with transaction.atomic():
            entry = CatalogueModel.objects.create(name=name, format=model_format, source_path=str(source),
                                                  status=RegisteredModel.Status.CHECKING,
                                                  default_enabled=bool(default_enabled), created_by=user)
            audit_record(actor=user, action="catalogue.upload", target=entry, ip_address=ip_address,
                         after={"name": name, "format": model_format, "files": sorted(f.name for f in files),
                                "bytes": sum(f.size or 0 for f in files), "default_enabled": entry.default_enabled})
            transaction.on_commit(lambda: _enqueue_catalogue_preparation(entry.pk))
    except BaseException as exc:
        uploads.discard(str(source))
        if isinstance(exc, IntegrityError):
            raise Invalid(f"The catalogue already has a model called “{name}”.", field="name") from None
        raise
    return entry


def catalogue_update(*, user, entry: CatalogueModel, default_enabled: bool, token=None,
                     ip_address: str | None = None) -> CatalogueModel:
    require_site_staff(user, token)
    before = {"default_enabled": entry.default_enabled}
    entry.default_enabled = bool(default_enabled)
    entry.save(update_fields=["default_enabled"])
    audit_record(actor=user, action="catalogue.update", target=entry, ip_address=ip_address, before=before,
                 after={"default_enabled": entry.default_enabled})
    return entry


@transaction.atomic
def catalogue_delete(*, user, entry: CatalogueModel, token=None, ip_address: str | None = None) -> None:
    """A site admin removes a base model from the catalogue, its uploaded files with it (once this commits).
    Refused (Conflict) while a worker prepares it, or while any project uses it: enabled there, an alias
    on it, or an adapter built on it (an adapter outlives the project's disabling of its base). The rows
    of projects that disabled it stay (lineage points at them), no longer tied to the catalogue."""
    require_site_staff(user, token)
    entry = CatalogueModel.objects.select_for_update().get(pk=entry.pk)  # no project enables it meanwhile
    if entry.status in (RegisteredModel.Status.CHECKING, RegisteredModel.Status.CONVERTING):
        raise Conflict(f"“{entry.name}” is being prepared by a worker ({entry.status}); delete it once that ends.",
                       field="status")
    rows = RegisteredModel.all_objects.filter(catalogue=entry)
    # The most specific use first: it says what to undo before the project can disable it.
    uses = (("aliased in", ModelAlias.objects.filter(Q(version__in=rows) | Q(canary_version__in=rows))
             .values_list("project__name", flat=True)),
            ("the base of adapters in", RegisteredModel.objects.filter(base_model__in=rows)
             .values_list("project__name", flat=True)),
            ("enabled in", rows.filter(deleted_at__isnull=True).values_list("project__name", flat=True)))
    for how, projects in uses:
        names = sorted(set(projects))
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            raise Conflict(f"“{entry.name}” is {how} {len(names)} project{'s' if len(names) > 1 else ''} ({shown}): "
                           "it can be deleted once no project uses it.", field="catalogue_model")
    audit_record(actor=user, action="catalogue.delete", target=entry, ip_address=ip_address,
                 before={"name": entry.name, "format": entry.format, "path": entry.source_path})
    rows.update(catalogue=None)
    source = entry.source_path
    entry.delete()
    if uploads.is_uploaded(source):
        transaction.on_commit(lambda: uploads.discard(source))


def _enqueue_catalogue_preparation(entry_id: int) -> None:
    def fail(reason: str) -> None:
        CatalogueModel.objects.filter(pk=entry_id).update(status=RegisteredModel.Status.FAILED, error=reason)
        _sync_if_catalogue(CatalogueModel.objects.get(pk=entry_id))

    enqueue(prepare_catalogue_task, entry_id, queue="default", on_failure=fail)


def run_catalogue_preparation(entry_id: int) -> None:
    """In a worker: inspect a catalogue model (and convert a GGUF), once for every project."""
    entry = CatalogueModel.objects.filter(pk=entry_id).first()
    if entry is None:
        return
    if entry.status == RegisteredModel.Status.CHECKING:
        run_inspection(entry_id, catalogue=True)
    elif entry.status == RegisteredModel.Status.CONVERTING:
        run_conversion(entry_id, catalogue=True)


def _sync_if_catalogue(entry) -> None:
    """What a worker learnt about a catalogue model, onto every project's row of it (the rows
    share its weights: nothing else to do for them)."""
    if isinstance(entry, CatalogueModel):
        RegisteredModel.all_objects.filter(catalogue=entry).update(
            **{field: getattr(entry, field) for field in CATALOGUE_FIELDS})
        if entry.status == RegisteredModel.Status.FAILED and uploads.is_uploaded(entry.source_path):
            uploads.discard(entry.source_path)  # the entry keeps the reason; the unusable files go


def _catalogue_row(project: Project, entry: CatalogueModel, *, actor, ip_address: str | None = None
                   ) -> tuple[RegisteredModel, bool]:
    """(the project's row of a catalogue model, whether it was made now). A project model of the
    same name on the same file (the demo project's, registered before the catalogue existed) is
    adopted rather than duplicated."""
    existing = project.models.filter(catalogue=entry).first()
    if existing is not None:
        return existing, False
    same_name = project.models.filter(name__iexact=entry.name).first()
    if same_name is not None:
        if (os.path.realpath(same_name.source_path) != os.path.realpath(entry.source_path)
                or same_name.kind != RegisteredModel.Kind.BASE):
            raise Invalid(f"This project already has another model called “{entry.name}”.", field="catalogue_model")
        same_name.catalogue = entry
        same_name.save(update_fields=["catalogue"])
        return same_name, False
    row = RegisteredModel.objects.create(project=project, name=entry.name, kind=RegisteredModel.Kind.BASE,
                                         catalogue=entry, created_by=actor if getattr(actor, "pk", None) else None,
                                         **{field: getattr(entry, field) for field in CATALOGUE_FIELDS})
    audit_record(actor=actor, action="model.enable", project=project, target=row, ip_address=ip_address,
                 after={"catalogue_model": entry.pk, "name": entry.name})
    return row, True


@transaction.atomic
def catalogue_enable(*, user, project: Project, entry_id, token=None, ip_address: str | None = None
                     ) -> RegisteredModel:
    """A project admin enables a catalogue model: the project gets a model row on its weights
    (nothing copied), usable at once (or when the catalogue's worker is done with it)."""
    policy.require(user, "model.enable", project, token)
    entry = _catalogue_entry(entry_id)
    return _catalogue_row(project, entry, actor=user, ip_address=ip_address)[0]


@transaction.atomic
def catalogue_disable(*, user, project: Project, entry_id, token=None, ip_address: str | None = None) -> None:
    """The catalogue model leaves the project (its row is soft-deleted: jobs and adapters made on it
    keep their lineage)."""
    policy.require(user, "model.enable", project, token)
    entry = _catalogue_entry(entry_id)
    row = project.models.filter(catalogue=entry).first()
    if row is None:
        raise NotFound("This catalogue model is not enabled in the project.")
    _refuse_if_aliased(row)
    audit_record(actor=user, action="model.disable", project=project, target=row, ip_address=ip_address,
                 before={"catalogue_model": entry.pk, "name": row.name})
    _soft_delete(row)


def _catalogue_entry(entry_id) -> CatalogueModel:
    try:
        # Locked: a catalogue_delete waits for this enabling (or disabling) to commit, and then sees it.
        return CatalogueModel.objects.select_for_update().get(pk=int(entry_id))
    except (CatalogueModel.DoesNotExist, ValueError, TypeError, OverflowError):
        raise Invalid("No such catalogue model.", field="catalogue_model") from None


def enable_defaults_for_new_project(project: Project) -> None:
    """A new project starts with every catalogue model marked default (the demo model)."""
    for entry in CatalogueModel.objects.filter(default_enabled=True):
        try:
            _catalogue_row(project, entry, actor=None)
        except Invalid:
            continue


def _soft_delete(model: RegisteredModel) -> None:
    """The row stays (lineage points at it); its exports go, files included, once this commits."""
    model.deleted_at = timezone.now()
    model.name = f"{model.name[:90]} (deleted #{model.pk})"
    model.save(update_fields=["deleted_at", "name"])
    export_ids = list(model.exports.values_list("pk", flat=True))
    model.exports.all().delete()
    transaction.on_commit(lambda: delete_export_files(export_ids))


def _refuse_if_aliased(model: RegisteredModel) -> None:
    alias = ModelAlias.objects.filter(version=model).select_related("model").first()
    if alias is not None:
        raise Invalid(f"The alias {alias.model.name}@{alias.name} points at “{model.name}”: move it first.",
                      field="model")


# --- adapters shared with another project ---------------------------------------------------------

def adapter_share(*, user, adapter: RegisteredModel, project_id, token=None,
                  ip_address: str | None = None) -> RegisteredModel:
    """Grant another project an adapter: it gets a model row on the same files (nothing copied),
    on its own row of the same catalogue base, with the adapter's lineage and where it came from.
    The sharer needs `model.share` here and `model.register` there (the receiving project's models
    are its own business); a project they cannot see is a 404."""
    policy.require(user, "model.share", adapter, token)
    target = policy.get_project(user, project_id, token=token)
    policy.require(user, "model.register", target, token)
    if target.pk == adapter.project_id:
        raise Invalid("Share with another project: this adapter is already in this one.", field="project")
    if adapter.kind != RegisteredModel.Kind.ADAPTER or adapter.shared_from_id:
        raise Invalid("Only a project's own adapters are shared (base models come from the catalogue).",
                      field="model")
    if adapter.status != RegisteredModel.Status.READY:
        raise Invalid("Only a ready adapter can be shared.", field="model")
    base = adapter.base_model
    if base.catalogue_id is None:
        raise Invalid(f"Its base model “{base.name}” is this project's own: only adapters of catalogue models can "
                      "be shared.", field="model")
    with transaction.atomic():
        existing = target.models.filter(shared_from=adapter).first()
        if existing is not None:
            return existing
        target_base = target.models.filter(catalogue_id=base.catalogue_id).first()
        if target_base is None:
            if not policy.can(user, "model.enable", target, token):
                raise Invalid(f"“{base.name}” is not enabled in {target.name}: its admins enable it from the "
                              "catalogue first.", field="project")
            target_base = _catalogue_row(target, base.catalogue, actor=user, ip_address=ip_address)[0]
        name = adapter.name
        if target.models.filter(name__iexact=name).exists():
            name = f"{adapter.name[:80]} (from {adapter.project.name[:30]})"
        if target.models.filter(name__iexact=name).exists():
            raise Invalid(f"{target.name} already has a model called “{name}”.", field="project")
        shared = RegisteredModel.objects.create(
            project=target, name=name, format=adapter.format, kind=RegisteredModel.Kind.ADAPTER,
            base_model=target_base, source_path=adapter.source_path, weights_path=adapter.weights_path,
            bucket_prefix=adapter.bucket_prefix,
            status=adapter.status, info=adapter.info, content_hash=adapter.content_hash, shared_from=adapter,
            created_by=user, lineage={**adapter.lineage, "shared_from": {
                "project": adapter.project_id, "project_name": adapter.project.name, "model": adapter.pk,
                "model_name": adapter.name}})
        audit_record(actor=user, action="model.share", project=adapter.project, target=adapter,
                     ip_address=ip_address, after={"project": target.pk, "shared_model": shared.pk})
    return shared


def adapter_shares(*, user, adapter: RegisteredModel, token=None):
    policy.require(user, "model.share", adapter, token)
    return adapter.shares.filter(deleted_at__isnull=True).select_related("project").order_by("project__name", "id")


@transaction.atomic
def adapter_unshare(*, user, adapter: RegisteredModel, project_id, token=None, ip_address: str | None = None) -> None:
    """Take the grant back: the other project's row of it is soft-deleted."""
    policy.require(user, "model.share", adapter, token)
    shared = adapter.shares.filter(project_id=_int_or_none(project_id), deleted_at__isnull=True).first()
    if shared is None:
        raise NotFound("This adapter is not shared with that project.")
    audit_record(actor=user, action="model.unshare", project=adapter.project, target=adapter,
                 ip_address=ip_address, before={"project": shared.project_id, "shared_model": shared.pk})
    ModelAlias.objects.filter(version=shared).delete()  # aliases over there no longer reach it
    _soft_delete(shared)


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


# --- aliases ---------------------------------------------------------------------------------------

ALIAS_PATTERN = re.compile(ALIAS_NAME)


def alias_versions(model: RegisteredModel):
    """What an alias of `model` may point at: the model itself and the versions made from it (its
    adapters, the models merged from them)."""
    from django.db.models import Q

    return RegisteredModel.objects.filter(project_id=model.project_id).filter(
        Q(pk=model.pk) | Q(base_model_id=model.pk) | Q(lineage__base_model=model.pk, lineage__has_key="merged_from"))


def alias_set(*, user, model: RegisteredModel, name: str, version, protected: bool | None = None, token=None,
              ip_address: str | None = None) -> ModelAlias:
    """Create an alias of `model` or move it onto `version` (an id): one audited action. A protected
    alias moves, and protection changes, only for holders of `model.promote`."""
    policy.require(user, "model.alias", model, token)
    name = (name or "").strip()
    if not ALIAS_PATTERN.match(name):
        raise Invalid("An alias is 1-48 lower-case letters, digits, '.', '_' or '-', starting with a letter or "
                      "digit (production, staging, team-a).", field="name")
    target = alias_versions(model).filter(pk=_int_or_none(version)).first() if _int_or_none(version) else None
    if target is None or not policy.can(user, "model.view", target, token):
        raise Invalid(f"version is not a version of “{model.name}” in this project (the model itself, its adapters "
                      "or their merges).", field="version")
    if target.status != RegisteredModel.Status.READY:
        raise Invalid(f"“{target.name}” is {target.status}: an alias points at a ready version.", field="version")
    with transaction.atomic():
        alias = ModelAlias.objects.select_for_update().filter(model=model, name=name).first()
        if alias is None or alias.version_id != target.pk:
            _require_gates(model, name, target)
        protecting = protected is not None and protected != (alias.protected if alias else False)
        if (alias is not None and alias.protected) or protecting:
            policy.require(user, "model.promote", model, token)
        before = None if alias is None else {"version": alias.version_id, "version_name": alias.version.name,
                                             "protected": alias.protected}
        if alias is None:
            alias = ModelAlias(project_id=model.project_id, model=model, name=name)
        alias.version, alias.updated_by = target, user if user.is_authenticated else None
        if protected is not None:
            alias.protected = bool(protected)
        if before is not None and before["version"] != target.pk:
            _clear_canary(alias)  # a move by hand ends any rollout: the alias now means `target`
        alias.save()
        audit_record(actor=user, action="model.alias_move" if before else "model.alias_create",
                     project=model.project, target=alias, ip_address=ip_address, before=before,
                     after={"alias": f"{model.name}@{name}", "version": target.pk, "version_name": target.name,
                            "protected": alias.protected})
    return alias


def _require_gates(model: RegisteredModel, alias: str, target: RegisteredModel) -> None:
    """Conflict (naming each failed metric, its value against its threshold) when an eval suite
    that gates this alias name has no passing run on `target`: no promotion, canary included,
    past a failed gate."""
    from apps.evaluation.selectors import gate_refusal

    reason = gate_refusal(model.project_id, alias, target.pk)
    if reason:
        raise Conflict(f"{model.name}@{alias} cannot move to “{target.name}”: {reason}.", field="version")


@transaction.atomic
def alias_delete(*, user, model: RegisteredModel, name: str, token=None, ip_address: str | None = None) -> None:
    policy.require(user, "model.alias", model, token)
    alias = ModelAlias.objects.select_for_update().filter(model=model, name=name).first()
    if alias is None:
        raise NotFound(f"“{model.name}” has no alias {str(name)[:48]!r}.")
    if alias.protected:
        policy.require(user, "model.promote", model, token)
    audit_record(actor=user, action="model.alias_delete", project=model.project, target=alias, ip_address=ip_address,
                 before={"alias": str(alias), "version": alias.version_id, "protected": alias.protected})
    alias.delete()


# --- canary rollouts -------------------------------------------------------------------------------

def _number(value, field: str, *, low: float, high: float, integer: bool = False, what: str):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)) \
            or not low <= value <= high:
        raise Invalid(f"{field} is {what}.", field=field)
    return value


def alias_canary_start(*, user, model: RegisteredModel, name: str, version, weight, steps=None, interval_s=0,
                       max_error_rate=None, max_p99_latency_s=None, min_requests=20, quality_judge=None,
                       max_quality_drop=None, token=None, ip_address: str | None = None) -> ModelAlias:
    """Send `weight` percent of the alias's callers to `version`, the rest staying on the alias's
    version; `steps` (rising weights, the last 100) are taken one per `interval_s` while the
    canary stays within its thresholds, and 100 promotes it. With `quality_judge` (a calibrated
    pointwise judge of the project, `compare.run`, and `provider.use` for a provider's) the canary's
    mean judge score may fall at most `max_quality_drop` below the stable version's. One audited
    action; a protected alias needs `model.promote`."""
    policy.require(user, "model.alias", model, token)
    weight = _number(weight, "weight", low=1, high=99, integer=True,
                     what="the canary's share of traffic, a whole percent from 1 to 99 (the alias's version "
                          "keeps the rest, so the two sum to 100)")
    steps = [] if steps is None else steps
    if not isinstance(steps, list) or len(steps) > 20:
        raise Invalid("steps is a list of at most 20 rising percentages ending at 100.", field="steps")
    previous = weight
    for step in steps:
        _number(step, "steps", low=previous + 1, high=100, integer=True,
                what="a list of rising whole percentages above weight, ending at 100")
        previous = step
    if steps and steps[-1] != 100:
        raise Invalid("steps end at 100: the last step promotes the canary.", field="steps")
    interval_s = _number(interval_s, "interval_s", low=1 if steps else 0, high=7 * 24 * 3600, integer=True,
                         what="the seconds between steps, from 1 to a week (0 without steps)")
    if max_error_rate is not None:
        _number(max_error_rate, "max_error_rate", low=0, high=1, what="a share of failed requests from 0 to 1")
    if max_p99_latency_s is not None:
        _number(max_p99_latency_s, "max_p99_latency_s", low=0.000001, high=3600,
                what="a 99th-percentile request time in seconds, above 0")
    min_requests = _number(min_requests, "min_requests", low=1, high=1_000_000, integer=True,
                           what="how many canary requests are judged before a rollback, at least 1")
    judge = _quality_judge(user, model, quality_judge, max_quality_drop, token)
    with transaction.atomic():
        alias = ModelAlias.objects.select_for_update().filter(model=model, name=str(name)).first()
        if alias is None:
            raise NotFound(f"“{model.name}” has no alias {str(name)[:48]!r}.")
        if alias.protected:
            policy.require(user, "model.promote", model, token)
        target = alias_versions(model).filter(pk=_int_or_none(version)).first() if _int_or_none(version) else None
        if target is None or not policy.can(user, "model.view", target, token):
            raise Invalid(f"version is not a version of “{model.name}” in this project (the model itself, its "
                          "adapters or their merges).", field="version")
        if target.status != RegisteredModel.Status.READY:
            raise Invalid(f"“{target.name}” is {target.status}: a canary is a ready version.", field="version")
        if target.pk == alias.version_id:
            raise Invalid(f"{model.name}@{alias.name} already serves “{target.name}”.", field="version")
        _require_gates(model, alias.name, target)
        if judge is not None and not alias.capture_enabled:
            raise Invalid(f"A quality judge scores the answers {model.name}@{alias.name} captures: turn its request "
                          "logging on first.", field="quality_judge")
        before = _canary_state(alias)
        now = timezone.now()
        alias.canary_version, alias.canary_weight = target, weight
        if before["canary_version"] != target.pk:
            alias.canary_started_at = now  # a new canary is judged on its own requests only
        alias.canary_stepped_at, alias.rollout_steps, alias.rollout_interval_s = now, steps, interval_s
        alias.max_error_rate, alias.max_p99_latency_s, alias.min_requests = max_error_rate, max_p99_latency_s, \
            min_requests
        alias.quality_judge, alias.max_quality_drop = judge, max_quality_drop if judge is not None else None
        alias.updated_by = alias.canary_started_by = user if user.is_authenticated else None
        alias.save()
        audit_record(actor=user, action="model.alias_canary", project=model.project, target=alias,
                     ip_address=ip_address, before=before, after=_canary_state(alias))
    return alias


def _quality_judge(user, model: RegisteredModel, judge_id, max_drop, token):
    """The judge a canary's quality is scored by, checked: a calibrated pointwise judge of the
    project that the starter may run, with a threshold on the 0..1 score scale."""
    if judge_id is None:
        if max_drop is not None:
            raise Invalid("max_quality_drop needs a quality_judge to score the answers.", field="quality_judge")
        return None
    from apps.evaluation.models import Judge
    from apps.evaluation.selectors import judge_calibration
    from workers.judging import POINTWISE

    _number(max_drop, "max_quality_drop", low=0, high=1,
            what="how far the canary's mean judge score (0 to 1) may fall below the stable version's, from 0 to 1")
    policy.require(user, "compare.run", model.project, token)
    judge_pk = None if isinstance(judge_id, bool) else _int_or_none(judge_id)
    judge = Judge.objects.filter(pk=judge_pk, project_id=model.project_id).select_related("project").first() \
        if judge_pk else None
    if judge is None:
        raise Invalid("quality_judge is not a judge of this project.", field="quality_judge")
    if judge.provider_model_id:
        policy.require(user, "provider.use", model.project, token)  # its calls go out on the starter's behalf
    if judge.kind != POINTWISE:
        raise Invalid(f"“{judge.name}” compares two answers; a canary's quality needs a pointwise judge.",
                      field="quality_judge")
    calibration = judge_calibration(judge)
    if not calibration["calibrated"]:
        raise Invalid(f"The judge “{judge.name}” is not calibrated ({calibration['reason']}), so it cannot roll a "
                      "canary back: calibrate it against people's votes first.", field="quality_judge")
    return judge


def alias_canary_stop(*, user, model: RegisteredModel, name: str, token=None,
                      ip_address: str | None = None) -> ModelAlias:
    """Roll a canary back by hand: every caller is served the alias's version again."""
    policy.require(user, "model.alias", model, token)
    with transaction.atomic():
        alias = ModelAlias.objects.select_for_update().filter(model=model, name=str(name)).first()
        if alias is None:
            raise NotFound(f"“{model.name}” has no alias {str(name)[:48]!r}.")
        if alias.protected:
            policy.require(user, "model.promote", model, token)
        if alias.canary_version_id is None:
            raise Conflict(f"{model.name}@{alias.name} has no canary.")
        return _end_canary(alias, action="model.alias_rollback", actor=user, ip_address=ip_address,
                           reason="rolled back by hand")


def alias_canary_decide(alias_id: int, *, breach: str | None, now=None) -> str | None:
    """What the canary's health says (serving judges it): a breach rolls it back; otherwise the
    next step is taken once its interval has passed, and 100 promotes it. Returns what happened:
    "rolled_back", "stepped", "promoted" or None. Audited as the system (no actor)."""
    now = now or timezone.now()
    with transaction.atomic():
        alias = ModelAlias.objects.select_for_update().select_related("model__project").filter(pk=alias_id).first()
        if alias is None or alias.canary_version_id is None:
            return None
        if breach:
            _end_canary(alias, action="model.alias_rollback", actor=None, reason=breach)
            return "rolled_back"
        due = alias.rollout_steps and alias.canary_stepped_at and \
            (now - alias.canary_stepped_at).total_seconds() >= alias.rollout_interval_s
        if not due:
            return None
        before = _canary_state(alias)
        weight, *rest = alias.rollout_steps
        if weight >= 100:
            canary = alias.canary_version
            _end_canary(alias, action="model.alias_promote", actor=None, promote=True,
                        reason=f"rollout finished: every step held its thresholds; {canary.name} now serves all")
            return "promoted"
        alias.canary_weight, alias.rollout_steps, alias.canary_stepped_at = weight, rest, now
        alias.save(update_fields=["canary_weight", "rollout_steps", "canary_stepped_at", "updated_at"])
        audit_record(actor=None, action="model.alias_canary_step", project=alias.model.project, target=alias,
                     before=before, after=_canary_state(alias))
        return "stepped"


def _canary_state(alias: ModelAlias) -> dict:
    return {"alias": f"{alias.model.name}@{alias.name}", "version": alias.version_id,
            "canary_version": alias.canary_version_id, "canary_weight": alias.canary_weight,
            "rollout_steps": list(alias.rollout_steps or []), "rollout_interval_s": alias.rollout_interval_s,
            "max_error_rate": alias.max_error_rate, "max_p99_latency_s": alias.max_p99_latency_s,
            "min_requests": alias.min_requests, "quality_judge": alias.quality_judge_id,
            "max_quality_drop": alias.max_quality_drop}


def _end_canary(alias: ModelAlias, *, action: str, actor, reason: str, promote: bool = False,
                ip_address: str | None = None) -> ModelAlias:
    before = _canary_state(alias)
    if promote:
        alias.version_id = alias.canary_version_id
    _clear_canary(alias)
    alias.save()
    audit_record(actor=actor, action=action, project=alias.model.project, target=alias, ip_address=ip_address,
                 before=before, after={**_canary_state(alias), "reason": reason})
    return alias


def _clear_canary(alias: ModelAlias) -> None:
    alias.canary_version, alias.canary_weight, alias.canary_started_at = None, 0, None
    alias.canary_stepped_at, alias.rollout_steps, alias.rollout_interval_s = None, [], 0
