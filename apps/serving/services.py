"""Creating generation requests: the model must be the project's and ready, the sampling
values sane, the messages well formed; everything a worker would refuse anyway is refused
here first, naming the field. Prompt length against the context is checked by the worker
(it needs the tokenizer), which reports it the same way."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.core.errors import Invalid, NotFound
from apps.core.jobs import enqueue
from apps.projects import policy
from apps.projects.models import Project
from apps.registry.models import RegisteredModel
from apps.registry.selectors import resolve_served
from apps.serving.models import Classification, Generation
from apps.serving.tasks import classify_task, generate_task

PARAM_FIELDS = ("max_new_tokens", "temperature", "top_p", "top_k", "stop", "seed", "presence_penalty",
                "frequency_penalty", "logprobs", "top_logprobs", "json_schema")


def servable_model(user, project: Project, ref, token=None) -> RegisteredModel:
    """A ready model or adapter of the project, by id, (case-insensitive) name, API id (the
    name's slug, apps.registry.selectors.api_ids) or either with `@alias` (a bare name follows
    its `production` alias when it has one): apps.registry.selectors. A miss is NotFound with
    field "model"."""
    return served_version(user, project, ref, token)[0]


def served_version(user, project: Project, ref, token=None, *, caller: str = ""):
    """(model, alias or None) as servable_model finds it; `caller` picks the side of an alias's canary."""
    try:
        return resolve_served(user, project, ref, token, caller=caller)
    except NotFound as missing:
        missing.field = "model"
        raise


def sampling_params(values: dict):
    """SamplingParams from request values, each refusal naming its field."""
    from workers.inference import InferenceInputError, SamplingParams

    unknown = set(values) - set(PARAM_FIELDS)
    if unknown:
        raise Invalid(f"Unknown sampling parameter {sorted(unknown)[0]}.", field=sorted(unknown)[0])
    values = {k: v for k, v in values.items() if v is not None}
    if isinstance(values.get("stop"), str):
        values["stop"] = (values["stop"],)
    elif isinstance(values.get("stop"), list):
        values["stop"] = tuple(values["stop"])
    try:
        params = SamplingParams(**values)
        params.validate()
    except InferenceInputError as exc:
        raise Invalid(str(exc), field=exc.field) from None
    except TypeError as exc:
        raise Invalid(f"A sampling parameter has the wrong type: {exc}", field="params") from None
    return params


def generation_create(*, user, project: Project, model_ref, source: str, messages=None, prompt=None,
                      params: dict | None = None, token=None, caller: str = "", first_choice: Generation | None = None,
                      choice_index: int = 0) -> Generation:
    """Check and record one generation; `generation_enqueue` sends it to a worker. `caller` names
    the end user for an alias's canary split (the client's `user` field; by default the account).
    Choice i > 0 of a request with n choices names the request's first generation (`first_choice`)."""
    from workers.inference import InferenceInputError
    from workers.inference.prompts import validate_messages

    policy.require(user, "model.generate", project, token)
    model, alias = served_version(user, project, model_ref, token, caller=caller or f"user:{user.pk}")
    if (messages is None) == (prompt is None):
        raise Invalid("Send either chat messages or a prompt.", field="messages")
    if messages is not None:
        try:
            validate_messages(messages)
        except InferenceInputError as exc:
            raise Invalid(str(exc), field=exc.field) from None
    elif not isinstance(prompt, str) or not prompt:
        raise Invalid("The prompt is a non-empty string.", field="prompt")
    sampling = sampling_params(params or {})
    return Generation.objects.create(project=project, model=model, alias=alias, user=user, source=source,
                                     messages=messages, prompt=prompt, params=_as_json(sampling),
                                     first_choice=first_choice, choice_index=choice_index)


def generation_cancel(*, user, project: Project, generation_id, token=None) -> bool:
    """Ask the worker to stop a generation after its next token; only its author may. Returns
    whether one was still running to stop (a finished or unknown one is a no-op)."""
    policy.require(user, "model.generate", project, token)
    try:
        generation_id = int(generation_id)
    except (TypeError, ValueError):
        raise Invalid("id is the generation to stop.", field="id") from None
    return bool(Generation.objects.filter(pk=generation_id, project=project, user=user,
                                          state__in=(Generation.State.QUEUED, Generation.State.RUNNING))
                .update(cancel_requested=True))


def generation_abandon(generation_id: int) -> None:
    """Its caller went away: a queued generation never starts (ended as cancelled, whether or not
    its message reached a worker, which skips what is no longer queued); a running one stops
    after its next token."""
    Generation.objects.filter(pk=generation_id, state=Generation.State.QUEUED).update(
        state=Generation.State.SUCCEEDED, finish_reason="cancelled", cancel_requested=True, finished_at=timezone.now())
    Generation.objects.filter(pk=generation_id, state=Generation.State.RUNNING).update(cancel_requested=True)


def generations_scrub(*, now=None) -> int:
    """Blank the prompt, messages, output and logprobs of every generation that ended more than
    SERVING_TEXT_RETENTION_S ago. Returns how many rows were scrubbed."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.SERVING_TEXT_RETENTION_S)
    return (Generation.objects.filter(state__in=Generation.ENDED, finished_at__lt=cutoff)
            .exclude(messages__isnull=True, prompt__isnull=True, output="", logprobs__isnull=True)
            .update(messages=None, prompt=None, output="", logprobs=None))


def _as_json(params) -> dict:
    return {field: list(value) if isinstance(value, tuple) else value
            for field in PARAM_FIELDS if (value := getattr(params, field)) is not None}


def generation_enqueue(generation_id: int) -> None:
    def fail(reason: str) -> None:
        generation = Generation.objects.get(pk=generation_id)
        generation.state, generation.error, generation.finished_at = Generation.State.FAILED, reason, timezone.now()
        generation.save(update_fields=["state", "error", "finished_at"])
        from apps.serving import events

        transaction.on_commit(lambda: events.finished(generation))

    enqueue(generate_task, generation_id, queue="inference", on_failure=fail)


MAX_CLASSIFY_TEXTS = 256     # texts per request: a few batches of the engine's 32 (workers.inference.classify)
MAX_CLASSIFY_CHARS = 8000    # characters per text: the classifier reads at most max_seq_len tokens of its end anyway


def is_classifier(model: RegisteredModel) -> bool:
    """Whether `model` is an adapter trained as a classifier (its lineage's config says so)."""
    config = (model.lineage or {}).get("config") or {}
    return model.kind == RegisteredModel.Kind.ADAPTER and config.get("method") == "classify"


def classifier_labels(model: RegisteredModel) -> list[str]:
    """The classes a classifier adapter chooses among (empty for any other model)."""
    return list(model.lineage["config"].get("class_labels") or []) if is_classifier(model) else []


def is_multi_label_classifier(model: RegisteredModel) -> bool:
    """Whether `model` is a classifier that predicts a list of classes (none, one or several) per text."""
    return is_classifier(model) and bool(model.lineage["config"].get("multi_label"))


def classification_start(*, user, model: RegisteredModel, texts: list[str], token=None) -> Classification:
    """Queue `texts` (already checked: 1..MAX_CLASSIFY_TEXTS non-empty strings of at most MAX_CLASSIFY_CHARS)
    for the classifier `model` on an `inference` worker. Invalid (field "model") when it is not a ready
    classifier."""
    policy.require(user, "model.generate", model.project, token)
    if not is_classifier(model):
        raise Invalid(f"“{model.name}” is not a classifier: train one with the classify method.", field="model")
    if model.status != RegisteredModel.Status.READY:
        raise Invalid(f"The model “{model.name}” is {model.status}, not ready.", field="model")
    with transaction.atomic():
        job = Classification.objects.create(project=model.project, model=model, user=user, texts=texts)
        transaction.on_commit(lambda: _enqueue_classification(job.pk))
    return job


def _enqueue_classification(job_id: int) -> None:
    enqueue(classify_task, job_id, queue=Classification.QUEUE, on_failure=lambda reason: Classification.objects.filter(
        pk=job_id).update(state=Classification.State.FAILED, finished_at=timezone.now(), error=reason))
