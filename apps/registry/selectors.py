"""Reads of the model registry."""

import hashlib
import re
from pathlib import Path

from django.conf import settings

MAX_ROOT_ENTRIES = 200


def model_root_entries() -> list[str]:
    """What can be registered by name from the model roots: their top-level .gguf files and
    directories holding a config.json (a name is resolved inside the roots, in order)."""
    found: list[str] = []
    for root in settings.MODEL_ROOTS:
        try:
            entries = sorted(Path(root).iterdir())
        except OSError:
            continue
        for entry in entries:
            if (entry.is_file() and entry.suffix == ".gguf") or (entry.is_dir() and (entry / "config.json").is_file()):
                if entry.name not in found:
                    found.append(entry.name)
            if len(found) >= MAX_ROOT_ENTRIES:
                return found
    return found


def model_slug(name: str) -> str:
    """A model's name as an id without spaces: lower case, every run of characters other than
    a-z, 0-9, '.', '_' and '-' one hyphen ("Tiny Llama v1.5" -> "tiny-llama-v1.5"); "" when
    nothing is left."""
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.")


def api_ids(models) -> dict[int, str]:
    """model id -> the id the OpenAI-compatible API gives it, for each of `models` (a project's):
    the slug of its name, or, when two of them would share it (names that differ only in spaces
    or punctuation) or it is empty, the slug followed by "-<model id>" ("model-<id>")."""
    slugs = {m.pk: model_slug(m.name) for m in models}
    taken: dict[str, int] = {}
    for slug in slugs.values():
        taken[slug] = taken.get(slug, 0) + 1
    return {pk: slug if slug and taken[slug] == 1 else f"{slug or 'model'}-{pk}" for pk, slug in slugs.items()}


def _by_name(models, ref: str):
    """The model called `ref` (case-insensitive), or whose API id it is; None."""
    found = models.filter(name__iexact=ref).first()
    if found is None:
        wanted = ref.lower()
        pk = next((pk for pk, api_id in api_ids(models.only("pk", "name")).items() if api_id == wanted), None)
        found = models.filter(pk=pk).first() if pk is not None else None
    return found


def resolve_model_ref(user, project, ref, token=None, *, ready: bool = True):
    """The model version a client means by `ref`, as the principal may see it in `project`:
    an id, a name (case-insensitive) or its API id (api_ids), or either as `name@alias`. A bare name means its `production`
    alias when it has one, the model itself otherwise. Read from the database on every call (no
    cache), so an alias moved is followed by the next request. NotFound when nothing matches."""
    return resolve_served(user, project, ref, token, ready=ready)[0]


def resolve_served(user, project, ref, token=None, *, ready: bool = True, caller: str = ""):
    """(version, alias or None) for `ref` as resolve_model_ref reads it; where the alias has a
    canary, `caller` (who the end user is) decides which of its two versions answers, the same one
    every time for the same caller."""
    from apps.core.errors import NotFound
    from apps.projects import policy
    from apps.registry.models import ModelAlias, RegisteredModel

    models = policy.visible_in_project(user, RegisteredModel, project, "model.view", token)
    wanted = models.filter(status=RegisteredModel.Status.READY) if ready else models
    if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
        found = wanted.filter(pk=int(ref)).first()
        if found is not None:
            return found, None
    if not isinstance(ref, str) or not ref.strip():
        raise NotFound(f"No ready model called {str(ref)[:120]!r} in this project.")
    ref = ref.strip()
    alias_name = None
    model = _by_name(models, ref)
    if model is None and "@" in ref:
        name, alias_name = ref.rsplit("@", 1)
        model = _by_name(models, name.strip())
    if model is None:
        raise NotFound(f"No ready model called {ref[:120]!r} in this project.")
    alias = ModelAlias.objects.filter(model=model, name=(alias_name or ModelAlias.PRODUCTION).lower()).first()
    if alias is None and alias_name is not None:
        raise NotFound(f"“{model.name}” has no alias {alias_name[:48]!r}.")
    if alias is None:
        version = model
    else:
        chosen = alias.canary_version_id if canary_serves(alias, caller) else alias.version_id
        version = wanted.filter(pk=chosen).first()
        if version is None and chosen != alias.version_id:  # a canary no longer ready: the stable answers
            version = wanted.filter(pk=alias.version_id).first()
    if version is None or (ready and version.status != RegisteredModel.Status.READY):
        raise NotFound(f"No ready model called {ref[:120]!r} in this project.")
    return version, alias


def canary_serves(alias, caller: str) -> bool:
    """Whether this caller is in the alias's canary share: a hash of (alias, caller) onto 0-99,
    so a caller stays on one version while the weight holds, and a step up only adds callers."""
    if not alias.canary_version_id or alias.canary_weight <= 0:
        return False
    digest = hashlib.sha256(f"{alias.pk}:{caller}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100 < alias.canary_weight


def served_names(user, project, token=None) -> list[tuple[str, object, str]]:
    """(the id a client may ask for, its model row, the display name) for every ready model and
    every alias of one the principal sees in the project: what /v1/models lists. The id is the
    model's API id (api_ids: no spaces), `<API id>@<alias>` for an alias; the display name is the
    model's name (`name@alias`), which a client may send too."""
    from apps.projects import policy
    from apps.registry.models import ModelAlias, RegisteredModel

    visible = policy.visible_in_project(user, RegisteredModel, project, "model.view", token)
    ids = api_ids(visible.only("pk", "name"))
    ready = {m.pk: m for m in visible.filter(status=RegisteredModel.Status.READY)}
    names = [(ids[m.pk], m, m.name) for m in ready.values()]
    for alias in ModelAlias.objects.filter(project=project, model__in=visible).select_related("model"):
        if alias.version_id in ready:
            names.append((f"{ids[alias.model_id]}@{alias.name}", ready[alias.version_id],
                          f"{alias.model.name}@{alias.name}"))
    return sorted(names, key=lambda entry: entry[0])


def catalogue_for_project(project) -> list[dict]:
    """Every catalogue model, with the project's row of it (None where not enabled)."""
    from apps.registry.models import CatalogueModel, RegisteredModel

    rows = {m.catalogue_id: m for m in RegisteredModel.objects.filter(project=project, catalogue__isnull=False)}
    return [{"entry": entry, "model": rows.get(entry.pk)} for entry in CatalogueModel.objects.order_by("name")]


def latest_precision_measurement(model):
    """The latest succeeded precision measurement that speaks for `model` (an adapter's: its base's
    too, as it is served over its base), or None."""
    from apps.registry.models import PrecisionMeasurement, RegisteredModel

    candidates = [model.pk]
    if model.kind == RegisteredModel.Kind.ADAPTER and model.base_model_id:
        candidates.append(model.base_model_id)
    return (PrecisionMeasurement.objects.filter(model_id__in=candidates, state=PrecisionMeasurement.State.SUCCEEDED)
            .order_by("-finished_at", "-id").first())


def serving_precision(model) -> str | None:
    """The precision the inference workers load `model` in: its `serving_precision`, `auto` resolved
    by the latest measurement (workers.inference.precision.choose_precision: fastest within the
    perplexity allowance; int8 never under an adapter); None for `auto` with nothing measured (the
    worker's default: fp32 on a CPU, bf16 on a GPU that has it)."""
    from apps.registry.models import RegisteredModel, ServingPrecision
    from workers.inference.precision import choose_precision

    if model.serving_precision != ServingPrecision.AUTO:
        return model.serving_precision
    measurement = latest_precision_measurement(model)
    if measurement is None:
        return None
    return choose_precision(measurement.results, adapter=model.kind == RegisteredModel.Kind.ADAPTER)


def precision_table(results: list[dict]) -> list[dict]:
    """A measurement's rows with their change against fp32: perplexity in percent, speed as a ratio."""
    fp32 = next((row for row in results if row.get("precision") == "fp32" and row.get("perplexity")), None)
    table = []
    for row in results:
        delta = speedup = None
        if fp32 is not None and row.get("perplexity") and row.get("tokens_per_s"):
            delta = round(100 * (row["perplexity"] / fp32["perplexity"] - 1), 2)
            speedup = round(row["tokens_per_s"] / fp32["tokens_per_s"], 2)
        table.append({**row, "delta_perplexity_pct": delta, "speedup": speedup})
    return table
