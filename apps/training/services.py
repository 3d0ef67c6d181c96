"""Launching, cancelling, resuming and copying fine-tune jobs (writes; every one asks the policy first).

A launch checks everything it can before a GPU is involved, each refusal naming its field:
the model and dataset version must be the project's and ready, the config must be valid
(workers.training.TrainConfig), its sequence length within the model's context, its custom
target modules present in the model, and the chosen split must hold rows usable for the
chosen format. Quotas (active jobs per person and per project) are counted under a lock on
the project row, so two concurrent launches cannot both slip under the cap.
"""

import hashlib
import json
import math

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.errors import Conflict, DomainError, Invalid, NotFound, PermissionDenied, QuotaExceeded
from apps.core.jobs import ask_to_cancel, enqueue
from apps.datasets.models import DatasetVersion
from apps.datasets.selectors import readable_version
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Project
from apps.registry.models import RegisteredModel
from apps.training.models import TrainingJob
from apps.training.tasks import train_task


def job_launch(*, user, project: Project, name: str, base_model: int, dataset_version: int, train_split: str = "",
               eval_split: str = "", config: dict | None = None, parent: TrainingJob | None = None, token=None,
               ip_address: str | None = None, idempotency_key: str = "",
               priority: str = "normal") -> tuple[TrainingJob, bool]:
    """Check and queue a LoRA fine-tune on the `gpu` queue. Returns (job, created): a replay
    with the same Idempotency-Key and the same request returns the first job, not a new one.
    `priority` low / normal / high (high: project admins, who hold project.edit)."""
    policy.require(user, "job.launch", project, token)
    priority_value = _checked_priority(user, project, priority, token)
    request = {"name": name, "base_model": base_model, "dataset_version": dataset_version,
               "train_split": train_split, "eval_split": eval_split, "config": config or {}, "priority": priority}
    request_hash = hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()
    idempotency_key = (idempotency_key or "").strip()
    if len(idempotency_key) > 200:
        raise Invalid("The Idempotency-Key header is at most 200 characters.", field="Idempotency-Key")
    if idempotency_key:
        earlier = TrainingJob.objects.filter(created_by=user, idempotency_key=idempotency_key).first()
        if earlier is not None:
            if earlier.request_hash != request_hash:
                raise Conflict("This Idempotency-Key was used for a different request.")
            return earlier, False

    name, model, version, train_config, train_split, eval_split = _checked_inputs(
        user, project, token, name=name, base_model=base_model, dataset_version=dataset_version,
        train_split=train_split, eval_split=eval_split, config=config)
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()  # serialises launches per project
        _check_quota(user, project)
        _check_budget(project)
        job = TrainingJob.objects.create(
            project=project, name=name, method=train_config.method, base_model=model, dataset_version=version,
            train_split=train_split, eval_split=eval_split, config=train_config.as_dict(), parent=parent,
            created_by=user, priority=priority_value,
            idempotency_key=idempotency_key, request_hash=request_hash)
        audit_record(actor=user, action="job.launch", project=project, target=job, ip_address=ip_address,
                     after={"name": name, "base_model": model.pk, "dataset_version": version.pk,
                            "content_hash": version.content_hash, "train_split": train_split,
                            "eval_split": eval_split, "parent": parent.pk if parent else None})
        transaction.on_commit(lambda: _enqueue(job.pk))
    return job, True


def job_estimate(*, user, project: Project, name: str, base_model: int, dataset_version: int, train_split: str = "",
                 eval_split: str = "", config: dict | None = None, token=None, priority: str = "normal") -> dict:
    """What a launch with these inputs would train and need: examples, optimizer steps, the LoRA
    parameters PEFT will train, memory (from the model's metadata) and time (apps.training.speed: the
    work of the method on this model over the speed measured on this installation's workers)."""
    from apps.registry.services import model_memory_estimate
    from apps.training import selectors
    from apps.training.speed import time_estimate

    policy.require(user, "job.launch", project, token)
    _, model, version, train_config, train_split, eval_split = _checked_inputs(
        user, project, token, name=name, base_model=base_model, dataset_version=dataset_version,
        train_split=train_split, eval_split=eval_split, config=config)
    examples = usable_rows(version, train_split, train_config.format, train_config.method,
                           train_config.label_column).count()
    per_step = train_config.batch_size * train_config.grad_accum
    steps = train_config.max_steps or math.ceil(examples * train_config.epochs / per_step)
    # "auto" means bf16 on a capable GPU and fp32 on CPU; the web tier cannot know which worker
    # takes the job, so both are shown.
    precisions = ["bf16", "fp32"] if train_config.precision == "auto" else [train_config.precision]
    trainable = _trainable_parameters(model, train_config)
    # Per device: with `devices` N on each of `nodes` M machines, each of the N x M processes holds the
    # whole model and its share of every micro-batch.
    per_device_batch = math.ceil(train_config.batch_size / (train_config.devices * train_config.nodes))
    memory = {precision: model_memory_estimate(model=model, precision=precision, batch_size=per_device_batch,
                                               seq_len=train_config.max_seq_len, lora_rank=train_config.lora_r,
                                               mode="lora", lora_parameters=trainable,
                                               quantization=train_config.quantization) for precision in precisions}
    timing = time_estimate(model=model, version=version, train_split=train_split, eval_split=eval_split,
                           train_config=train_config, examples=examples)
    project.refresh_from_db(fields=["gpu_hour_budget"])
    return {"examples": examples, "optimizer_steps": steps, "memory": memory, "trainable_parameters": trainable,
            "devices": train_config.devices, "nodes": train_config.nodes, "per_device_batch": per_device_batch,
            **timing, "gpu_hours_used": round(selectors.gpu_hours_used(project), 3), "gpu_hour_budget": project.gpu_hour_budget}


def _trainable_parameters(model: RegisteredModel, train_config) -> int | None:
    """What PEFT will train for this config's target modules, from the weights' headers (no weights
    read); None when the headers cannot be read here."""
    from pathlib import Path

    from workers.models import ModelSafetyError
    from workers.training import ConfigError, lora_trainable_parameters

    try:
        return lora_trainable_parameters(Path(model.weights_path), train_config)
    except (ModelSafetyError, ConfigError, OSError):
        return None


def _checked_inputs(user, project: Project, token, *, name, base_model, dataset_version, train_split, eval_split,
                    config):
    name = " ".join((name or "").split())
    if not name or len(name) > 120:
        raise Invalid("A job needs a name of at most 120 characters.", field="name")
    model = _launchable_model(user, project, base_model, token)
    version = readable_version(user, project, dataset_version, token)
    config = config or {}
    if isinstance(config, dict) and config.get("method") == "classify" and not config.get("class_labels"):
        # The classes are the training rows' (the split checked first, so a wrong one is named as such).
        _checked_splits(version, train_split, "", "prompt_response", "sft", check_rows=False)
        label_column = config.get("label_column", "label")
        classes, multi_label = class_labels(version, (train_split or "").strip(), label_column)
        if config.get("multi_label") is True and not multi_label:
            raise Invalid(f"multi_label: “{label_column}” holds one class per row, not lists of classes; train a "
                          "single-label classifier on it.", field="config.multi_label")
        config = {**config, "class_labels": classes, "multi_label": multi_label}
    train_config = _checked_config(config, model)
    train_split, eval_split = _checked_splits(version, train_split, eval_split, train_config.format,
                                              train_config.method, label_column=train_config.label_column)
    if not train_config.sample_prompts and train_config.method != "classify":  # a classifier generates nothing
        train_config.sample_prompts = _sample_prompts(version, eval_split or train_split, train_config.format)
    return name, model, version, train_config, train_split, eval_split


SAMPLE_PROMPTS = 3


def _sample_prompts(version: DatasetVersion, split: str, fmt: str) -> list[str]:
    """The fixed prompts generated at every eval, so people see the model change: by default the
    first few of the evaluation split (else the training split)."""
    prompts = []
    for row in usable_rows(version, split, fmt).order_by("position")[:SAMPLE_PROMPTS]:
        if fmt == "chat":
            turns = row.messages if isinstance(row.messages, list) else []
            text = next((t.get("content") for t in turns if isinstance(t, dict) and t.get("role") == "user"), None)
        else:
            text = row.prompt
        if isinstance(text, str) and text.strip():
            prompts.append(text[:2000])
    return prompts


def _launchable_model(user, project: Project, model_id, token) -> RegisteredModel:
    try:
        model = policy.get_object(user, RegisteredModel, model_id, "model.view", token, project_id=project.pk)
    except NotFound:
        raise Invalid("No such model in this project.", field="base_model") from None
    if model.kind != RegisteredModel.Kind.BASE:
        raise Invalid("Fine-tune a base model; an adapter cannot be the base of another.", field="base_model")
    if model.status != RegisteredModel.Status.READY:
        raise Invalid(f"The model “{model.name}” is {model.status}, not ready.", field="base_model")
    return model



def _checked_config(config: dict, model: RegisteredModel):
    from workers.training import ConfigError, TrainConfig, target_module_names

    if not isinstance(config, dict):
        raise Invalid("The config is an object of training settings.", field="config")
    try:
        train_config = TrainConfig.from_dict(config)
        train_config.validate()
    except ConfigError as exc:
        raise Invalid(str(exc), field=f"config.{exc.field}") from None  # "batch_size: must be at least 1."
    if train_config.quantization != "none" and not workers_have_cuda():
        raise Invalid(f"quantization: {train_config.quantization} base weights (QLoRA) need a CUDA GPU, and this "
                      "installation's training workers have none; choose none.", field="config.quantization")
    most = max_devices()
    if train_config.devices > most:
        raise Invalid(f"devices: at most {most}, what this installation's workers can give (one process per GPU, "
                      f"or per CPU core); the job asks for {train_config.devices}.", field="config.devices")
    if train_config.nodes > settings.TRAINING_MAX_NODES:
        allowed = (f"at most {settings.TRAINING_MAX_NODES}" if settings.TRAINING_MAX_NODES > 1
                   else "jobs across machines are not enabled on this installation (TRAINING_MAX_NODES)")
        raise Invalid(f"nodes: {allowed}; the job asks for {train_config.nodes} machines.", field="config.nodes")
    context = model.info.get("context_length")
    if context and train_config.max_seq_len > context:
        raise Invalid(f"max_seq_len {train_config.max_seq_len} is beyond the model's context of {context} tokens.",
                      field="config.max_seq_len")
    if isinstance(train_config.target_modules, list):
        known = target_module_names(model.weights_path)
        unknown = sorted(set(train_config.target_modules) - known)
        if unknown:
            raise Invalid(f"The model has no module called {', '.join(unknown)}; it has {', '.join(sorted(known))}.",
                          field="config.target_modules")
    return train_config


def workers_have_cuda() -> bool:
    """settings.TRAINING_CUDA: "auto" (this machine has NVIDIA devices, counted without torch), or a
    yes/no an operator sets where the web tier runs apart from the GPU workers."""
    import glob

    setting = str(settings.TRAINING_CUDA).strip().lower()
    if setting in ("1", "true", "yes", "on"):
        return True
    if setting in ("0", "false", "no", "off"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def max_devices() -> int:
    """The most devices a job may ask for: settings.TRAINING_MAX_DEVICES, else this machine's GPUs (counted
    without importing torch in the web process), else its CPU cores."""
    import glob
    import os

    if settings.TRAINING_MAX_DEVICES > 0:
        return settings.TRAINING_MAX_DEVICES
    gpus = len(glob.glob("/dev/nvidia[0-9]*"))
    if gpus:
        return gpus
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _checked_splits(version: DatasetVersion, train_split: str, eval_split: str, fmt: str,
                    method: str = "sft", *, label_column: str = "label", check_rows: bool = True) -> tuple[str, str]:
    train_split, eval_split = (train_split or "").strip(), (eval_split or "").strip()
    splits = set(version.rows.exclude(split="").values_list("split", flat=True).distinct())
    for field, split in (("train_split", train_split), ("eval_split", eval_split)):
        if split and split not in splits:
            known = ", ".join(sorted(splits)) or "none: split the version first"
            raise Invalid(f"Version {version.number} has no “{split}” split (its splits: {known}).", field=field)
    if train_split and train_split == eval_split:
        raise Invalid("Evaluate on a split other than the training split.", field="eval_split")
    if check_rows and not usable_rows(version, train_split, fmt, method, label_column).exists():
        from workers.training.methods import get_method

        where = f"the “{train_split}” split of version {version.number}" if train_split else f"version {version.number}"
        needs = get_method(method).ROWS.needs
        if needs:
            raise Invalid(f"No row of {where} has {needs}.", field="dataset_version")
        what = "a prompt and a response" if fmt == "prompt_response" else "chat messages"
        raise Invalid(f"No row of {where} has {what}, which the {fmt} format needs.", field="dataset_version")
    return train_split, eval_split


def usable_rows(version: DatasetVersion, split: str, fmt: str, method: str = "sft", label_column: str = "label"):
    """The rows of `split` the engine can train on: the format's columns (a classifier needs no response),
    every key the method reads beyond them (dpo: the rejected answer) non-empty in the row's metadata, and
    for a classifier a non-empty class in `label_column` (the label, else that metadata key)."""
    from workers.training.methods import get_method

    spec = get_method(method).ROWS
    rows = version.rows.all()
    if split:
        rows = rows.filter(split=split)
    if fmt == "chat":
        return rows.filter(messages__isnull=False)
    rows = rows.exclude(Q(prompt__isnull=True) | Q(prompt=""))
    if spec.response:
        rows = rows.exclude(Q(response__isnull=True) | Q(response=""))
    for key in spec.extra:  # annotation and comparison exports keep them as metadata
        rows = rows.filter(metadata__has_key=key).exclude(**{f"metadata__{key}": ""})
    if spec.label:
        rows = (rows.exclude(Q(label__isnull=True) | Q(label="")) if label_column == "label"
                else rows.filter(metadata__has_key=label_column).exclude(**{f"metadata__{label_column}": ""}))
    return rows


MAX_CLASSES = 200         # a classifier's outputs: beyond this a "label" column is more likely free text
MAX_LABEL_COLUMN = 200    # characters of a label column's name (a metadata key)
MAX_LABEL_VALUES = 20_000  # distinct values (class lists, for multi-label) read to find the classes


def class_labels(version: DatasetVersion, split: str, label_column) -> tuple[list[str], bool]:
    """The classes a classifier on `split` of `version` learns: the distinct non-empty texts of
    `label_column` (the row's label, else that metadata key), sorted, and whether the column holds lists
    of them (a multi-label annotation field's export: the classes are the texts in the lists). Raises
    Invalid naming config.label_column when the rows have fewer than two classes, too many to be
    classes, or mix lists and single classes."""
    if not isinstance(label_column, str) or not label_column.strip() or len(label_column) > MAX_LABEL_COLUMN:
        raise Invalid(f"label_column: name the column that holds each row's class (at most {MAX_LABEL_COLUMN} "
                      "characters): label, or a metadata key.", field="config.label_column")
    rows = version.rows.all()
    if split:
        rows = rows.filter(split=split)
    if label_column == "label":
        values = rows.exclude(label__isnull=True).values_list("label", flat=True).distinct()
    else:
        values = (rows.filter(metadata__has_key=label_column)
                  .values_list(f"metadata__{label_column}", flat=True).distinct())
    where = f"the “{split}” split of version {version.number}" if split else f"version {version.number}"
    singles, listed, lists = set(), set(), False
    for value in values[:MAX_LABEL_VALUES].iterator():
        if isinstance(value, list):
            lists = True
            listed.update(c for c in value if isinstance(c, str) and c.strip())
        elif isinstance(value, str) and value.strip():
            singles.add(value)
        if len(singles) + len(listed) > MAX_CLASSES:
            raise Invalid(f"label_column: “{label_column}” of {where} has more than {MAX_CLASSES} distinct values; "
                          "a classifier needs a column of classes.", field="config.label_column")
    if lists and singles:
        raise Invalid(f"label_column: “{label_column}” of {where} holds both lists of classes and single classes "
                      f"(such as “{min(singles)}”); a classifier needs one class per row, or a list per row.",
                      field="config.label_column")
    classes = sorted(listed or singles)
    if len(classes) < 2:
        found = f"only the class “{classes[0]}”" if classes else "no labels"
        raise Invalid(f"label_column: “{label_column}” of {where} has {found}; a classifier needs rows of at "
                      "least two classes.", field="config.label_column")
    return classes, lists


def _check_quota(user, project: Project, adding: int = 1) -> None:
    """QuotaExceeded when `adding` more jobs (a sweep's, all at once) pass the active-jobs caps."""
    active = TrainingJob.objects.filter(state__in=TrainingJob.ACTIVE)
    mine, cap = active.filter(created_by=user).count(), settings.TRAINING_MAX_ACTIVE_JOBS_PER_USER
    if mine + adding > cap:
        raise QuotaExceeded(f"You already have {mine} jobs queued or running and may have {cap}; wait for one to "
                            "end or cancel one." if adding == 1 else f"This sweep's {adding} jobs and your {mine} "
                            f"queued or running would pass the {cap} you may have at once.")
    theirs, cap = active.filter(project=project).count(), settings.TRAINING_MAX_ACTIVE_JOBS_PER_PROJECT
    if theirs + adding > cap:
        raise QuotaExceeded(f"This project already has {theirs} jobs queued or running and may have {cap}; wait "
                            "for one to end or cancel one." if adding == 1 else f"This sweep's {adding} jobs and the "
                            f"project's {theirs} queued or running would pass the {cap} it may have at once.")


def _enqueue(job_id: int) -> None:
    enqueue(train_task, job_id, queue=TrainingJob.broker_queue(job_id), priority=TrainingJob.broker_priority(job_id),
            on_failure=lambda reason: TrainingJob.objects.filter(pk=job_id).update(
                state=TrainingJob.State.FAILED, finished_at=timezone.now(), error=reason))


def _checked_priority(user, project: Project, priority, token) -> int:
    names = {label: value for value, label in TrainingJob.Priority.choices}
    if priority not in names:
        raise Invalid(f"priority is one of {', '.join(names)}.", field="priority")
    if names[priority] == TrainingJob.Priority.HIGH and not policy.can(user, "project.edit", project, token):
        raise PermissionDenied("project.edit", "Only project admins (project.edit) launch at high priority.")
    return names[priority]


class BudgetExceeded(DomainError):
    """The project has used its GPU-hour budget."""

    status = 409


def _check_budget(project: Project) -> None:
    from apps.training.selectors import gpu_hours_used

    budget = Project.objects.values_list("gpu_hour_budget", flat=True).get(pk=project.pk)
    if budget is None:
        return
    used = gpu_hours_used(project)
    if used >= budget:
        raise BudgetExceeded(f"This project has used {used:.2f} of its {budget:g} GPU-hours; an admin can raise "
                             "the budget in the project's settings.", field="gpu_hour_budget")


def job_cancel(*, user, job: TrainingJob, token=None, ip_address: str | None = None) -> TrainingJob:
    """A queued job ends at once; a running one stops before its next optimizer step and keeps
    its last checkpoint (the worker marks it cancelled)."""
    policy.require(user, "job.cancel", job, token)
    with transaction.atomic():
        job = ask_to_cancel(TrainingJob, job.pk, what="job")
        audit_record(actor=user, action="job.cancel", project=job.project, target=job, ip_address=ip_address)
    from apps.training import events

    events.job_state(job)
    return job


def job_resume(*, user, job: TrainingJob, token=None, ip_address: str | None = None) -> TrainingJob:
    """Queue a failed or cancelled job again; it continues from its last checkpoint."""
    policy.require(user, "job.launch", job, token)
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=job.project_id).first()
        job = TrainingJob.objects.select_for_update().get(pk=job.pk)
        if job.state not in (TrainingJob.State.FAILED, TrainingJob.State.CANCELLED):
            raise Conflict(f"Only a failed or cancelled job resumes; this one is {job.state}.")
        _check_quota(user, job.project)
        job.state, job.cancel_requested, job.error, job.traceback = TrainingJob.State.QUEUED, False, "", ""
        job.finished_at, job.runs = None, 0
        job.save(update_fields=["state", "cancel_requested", "error", "traceback", "finished_at", "runs"])
        audit_record(actor=user, action="job.resume", project=job.project, target=job, ip_address=ip_address,
                     after={"from_step": job.checkpoint_step})
        transaction.on_commit(lambda: _enqueue(job.pk))
    return job


def job_copy(*, user, job: TrainingJob, name: str = "", config: dict | None = None, token=None,
             ip_address: str | None = None, **inputs) -> TrainingJob:
    """A new job from this one's inputs and config ("reproduce"), with any of them changed
    ("edited copy"): `config` entries override the original's."""
    policy.require(user, "job.view", job, token)
    launch = {"base_model": job.base_model_id, "dataset_version": job.dataset_version_id,
              "train_split": job.train_split, "eval_split": job.eval_split, **inputs}
    copy, _ = job_launch(user=user, project=job.project, name=name or f"{job.name} (copy)"[:120],
                         config={**job.config, **(config or {})}, parent=job, token=token, ip_address=ip_address,
                         **launch)
    return copy


# --- sweeps --------------------------------------------------------------------------------------


def sweep_launch(*, user, project: Project, name: str, strategy: str, space, max_jobs, base_model: int,
                 dataset_version: int, train_split: str = "", eval_split: str = "", config: dict | None = None,
                 seed=0, priority: str = "normal", token=None, ip_address: str | None = None):
    """Launch up to `max_jobs` fine-tunes over a grid or a seeded random sample of `space` (apps.training.sweeps):
    each job is `config` with its point, on the same model, dataset version, splits and priority. Every
    point's config is checked, then the quotas and the GPU-hour budget for the whole sweep (its jobs'
    estimated hours on top of those used), before any job is created; then all are created and queued at once.
    Returns (sweep, jobs)."""
    from apps.training import sweeps
    from apps.training.models import Sweep

    policy.require(user, "job.launch", project, token)
    priority_value = _checked_priority(user, project, priority, token)
    most = settings.TRAINING_SWEEP_MAX_JOBS
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or not 1 <= max_jobs <= most:
        raise Invalid(f"max_jobs: a whole number from 1 to {most} (the most jobs one sweep launches here).",
                      field="max_jobs")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        raise Invalid("seed: a whole number from 0 to 2147483647.", field="seed")
    space = sweeps.checked_space(strategy, space)
    if not isinstance(config, dict | None):
        raise Invalid("The config is an object of training settings.", field="config")
    shared = {key: value for key, value in (config or {}).items() if key not in space}
    name, model, version, base_config, train_split, eval_split = _checked_inputs(
        user, project, token, name=name, base_model=base_model, dataset_version=dataset_version,
        train_split=train_split, eval_split=eval_split, config=shared)
    trials = []
    for point in sweeps.points(strategy, space, max_jobs=max_jobs, seed=seed):
        try:
            trials.append((point, _checked_config({**base_config.as_dict(), **point}, model)))
        except Invalid as exc:  # a value of the space out of its option's range names the space
            option = (exc.field or "").removeprefix("config.")
            if option in point:
                raise Invalid(f"space.{option}: {point[option]:g} is refused: {exc.message}",
                              field=f"space.{option}") from None
            raise
    hours = _sweep_gpu_hours(project, model, version, train_split, eval_split, [c for _, c in trials])
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()  # serialises launches per project
        _check_quota(user, project, adding=len(trials))
        _check_sweep_budget(project, hours, len(trials))
        sweep = Sweep.objects.create(
            project=project, name=name, strategy=strategy, space=space, seed=seed, max_jobs=max_jobs,
            base_model=model, dataset_version=version, train_split=train_split, eval_split=eval_split,
            base_config=shared, priority=priority_value, estimated_gpu_hours=hours, created_by=user)
        jobs = [TrainingJob.objects.create(
            project=project, name=f"{name} · {sweeps.point_label(point)}"[:120], method=train_config.method,
            base_model=model, dataset_version=version, train_split=train_split, eval_split=eval_split,
            config=train_config.as_dict(), sweep=sweep, created_by=user, priority=priority_value)
            for point, train_config in trials]
        audit_record(actor=user, action="sweep.launch", project=project, target=sweep, ip_address=ip_address,
                     after={"strategy": strategy, "space": space, "seed": seed, "max_jobs": max_jobs,
                            "jobs": [job.pk for job in jobs], "base_model": model.pk, "dataset_version": version.pk,
                            "content_hash": version.content_hash, "estimated_gpu_hours": hours})
        for job in jobs:
            transaction.on_commit(lambda pk=job.pk: _enqueue(pk))
    return sweep, jobs


def _sweep_gpu_hours(project: Project, model, version, train_split: str, eval_split: str,
                     configs: list) -> float | None:
    """The sweep's estimated GPU-hours (each job's time estimate times its devices), or None when the project
    has no budget (nothing is estimated then). BudgetExceeded when there is a budget and no speed is measured
    yet on the model (the estimate queues a calibration run, outside the launch's transaction)."""
    from apps.training.speed import time_estimate

    if Project.objects.values_list("gpu_hour_budget", flat=True).get(pk=project.pk) is None:
        return None
    examples = {}
    hours = 0.0
    for train_config in configs:
        key = (train_config.format, train_config.method)
        if key not in examples:
            examples[key] = usable_rows(version, train_split, *key).count()
        seconds = time_estimate(model=model, version=version, train_split=train_split, eval_split=eval_split,
                                train_config=train_config, examples=examples[key])["time_s"]
        if seconds is None:
            raise BudgetExceeded("This project has a GPU-hour budget and no training speed is measured yet for "
                                 f"“{model.name}”, so the sweep's hours cannot be checked against it; a short "
                                 "calibration run is queued: launch the sweep again once it has run.",
                                 field="gpu_hour_budget")
        hours += seconds * train_config.devices / 3600
    return round(hours, 4)


def _check_sweep_budget(project: Project, hours: float | None, jobs: int) -> None:
    """BudgetExceeded when the sweep's hours and those used pass the budget (under the launch's lock)."""
    from apps.training.selectors import gpu_hours_used

    budget = Project.objects.values_list("gpu_hour_budget", flat=True).get(pk=project.pk)
    if budget is None:
        return
    used = gpu_hours_used(project)
    if hours is None or used + hours > budget:  # None: the budget was set meanwhile
        need = "an unknown number of" if hours is None else f"about {hours:.2f}"
        raise BudgetExceeded(f"This sweep's {jobs} jobs need {need} GPU-hours; the project has used {used:.2f} of "
                             f"its {budget:g}, so {max(budget - used, 0):.2f} are left. Launch fewer or shorter "
                             "jobs, or an admin can raise the budget.", field="gpu_hour_budget")


def sweep_cancel(*, user, sweep, token=None, ip_address: str | None = None):
    """Cancel every job of the sweep that has not ended (queued ones at once, running ones at their next
    step) and mark the sweep cancelled. Conflict when it was already cancelled."""
    from apps.training import events
    from apps.training.models import Sweep

    policy.require(user, "job.cancel", sweep, token)
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().get(pk=sweep.pk)
        if sweep.cancelled_at is not None:
            raise Conflict("This sweep is already cancelled.")
        cancelled = [ask_to_cancel(TrainingJob, pk, what="job") for pk in
                     sweep.jobs.filter(state__in=TrainingJob.ACTIVE).values_list("pk", flat=True)]
        sweep.cancelled_at = timezone.now()
        sweep.save(update_fields=["cancelled_at"])
        audit_record(actor=user, action="sweep.cancel", project=sweep.project, target=sweep, ip_address=ip_address,
                     after={"jobs": [job.pk for job in cancelled]})
    for job in cancelled:
        events.job_state(job)
    return sweep
