"""Creating, cancelling and deleting comparisons, serving blind pairs, casting votes and
exporting them as a preference dataset version (writes; each asks the policy first).

A comparison is checked whole before anything is queued, each refusal naming its field: 2 to
4 distinct ready models of the project, a non-empty prompt set (typed, or sampled from a
dataset version of the project), sane sampling parameters.
"""

import random

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.comparison.models import Comparison, Contestant, Output, Pair, Prompt, Vote
from apps.comparison.selectors import entrant
from apps.comparison.tasks import compare_task
from apps.core.errors import Conflict, Invalid, NotFound, QuotaExceeded
from apps.core.jobs import ask_to_cancel, enqueue
from apps.datasets.models import Dataset, DatasetVersion
from apps.datasets.selectors import readable_version
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Project
from apps.registry.models import RegisteredModel

MIN_MODELS, MAX_MODELS = 2, 4
MAX_PROMPTS = 500  # a grid of 500 x 4 cells is already an afternoon of voting
MAX_PROMPT_CHARS = 20_000
MAX_PROVIDER_REF = 320  # "provider/model": the two names' lengths
DEFAULT_MAX_NEW_TOKENS = 128


def comparison_create(*, user, project: Project, name: str, models: list, provider_models: list | None = None,
                      prompts: list | None = None,
                      references: list | None = None, dataset_version: int | None = None, split: str = "",
                      sample_size: int | None = None, seed: int = 0, params: dict | None = None, token=None,
                      ip_address: str | None = None) -> Comparison:
    """Check and queue a comparison. Prompts are either `prompts` (with optional `references`,
    one per prompt) or `sample_size` rows sampled (seeded) from `dataset_version`, optionally
    from one `split`; a row's reference is its reference, else its response. The columns are
    `models` (of the project), then `provider_models` (ids or "provider/model" names)."""
    from apps.serving.services import sampling_params

    policy.require(user, "compare.run", project, token)
    name = " ".join((name or "").split())
    if not name or len(name) > 120:
        raise Invalid("A comparison needs a name of at most 120 characters.", field="name")
    outside = _checked_provider_models(user, project, provider_models, token)
    chosen = _checked_models(user, project, models, token, columns_left=MAX_MODELS - len(outside))
    if not isinstance(params, dict):
        raise Invalid("params is an object of sampling settings.", field="params")
    try:
        sampling = sampling_params({"max_new_tokens": DEFAULT_MAX_NEW_TOKENS, **params})
    except Invalid as exc:  # "params.temperature": the top-level `seed` is the sampling of prompts
        raise Invalid(exc.message, field=f"params.{exc.field}") from None
    version = None
    if dataset_version is not None:
        if prompts:
            raise Invalid("Give typed prompts or a dataset version, not both.", field="prompts")
        version = readable_version(user, project, dataset_version, token)
        rows, source = _sampled_rows(version, split=split, sample_size=sample_size, seed=seed)
    else:
        rows, source = _typed_rows(prompts, references), {"kind": "ad_hoc"}
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()  # serialises the count below
        active = Comparison.objects.filter(project=project, state__in=Comparison.ACTIVE).count()
        if active >= settings.COMPARISON_MAX_ACTIVE_PER_PROJECT:
            raise QuotaExceeded(f"This project already has {active} comparisons queued or running; wait for one to "
                                "end or cancel one.")
        comparison = Comparison.objects.create(
            project=project, name=name, params=_params_json(sampling), source=source, dataset_version=version,
            cells_total=len(rows) * (len(chosen) + len(outside)), created_by=user)
        Contestant.objects.bulk_create([Contestant(comparison=comparison, model=model, position=i)
                                        for i, model in enumerate(chosen)]
                                       + [Contestant(comparison=comparison, provider_model=model, position=i)
                                          for i, model in enumerate(outside, start=len(chosen))])
        Prompt.objects.bulk_create([Prompt(comparison=comparison, position=i, text=text, reference=reference,
                                           source_position=origin)
                                    for i, (text, reference, origin) in enumerate(rows)])
        audit_record(actor=user, action="comparison.create", project=project, target=comparison,
                     ip_address=ip_address, after={"name": name, "models": [m.pk for m in chosen],
                                                   "provider_models": [str(m) for m in outside],
                                                   "prompts": len(rows), "source": source})
        transaction.on_commit(lambda: _enqueue(comparison.pk))
    return comparison


COMPARE_WITH_BASE_PROMPTS = 16


def compare_with_base(*, user, job, token=None, ip_address: str | None = None) -> Comparison:
    """A comparison of a finished fine-tune's adapter against its base model, on a seeded sample
    of the job's evaluation split (else its training split): does the adapter beat the base?"""
    if job.adapter_id is None:
        raise Invalid("This job has no adapter yet: compare it once it has succeeded.", field="job")
    return comparison_create(
        user=user, project=job.project, name=f"{job.name}: adapter vs base"[:120],
        models=[job.base_model_id, job.adapter_id], dataset_version=job.dataset_version_id,
        split=job.eval_split or job.train_split, sample_size=COMPARE_WITH_BASE_PROMPTS, seed=job.pk, params={},
        token=token, ip_address=ip_address)


def _checked_provider_models(user, project: Project, refs, token) -> list:
    """Provider models enabled for the project, each once, for someone who may use them, in a
    project that lets its data go out."""
    from apps.providers import selectors as provider_selectors
    from apps.providers.services import require_outside_allowed

    if refs is None or refs == []:
        return []
    if not isinstance(refs, list) or len(refs) > MAX_MODELS:
        raise Invalid(f"provider_models is a list of at most {MAX_MODELS} provider models.", field="provider_models")
    for ref in refs:
        if not ((isinstance(ref, int) and not isinstance(ref, bool) and 0 < ref < 2**63)
                or (isinstance(ref, str) and 0 < len(ref) <= MAX_PROVIDER_REF)):
            raise Invalid("Each provider model is its id or its “provider/model” name.", field="provider_models")
    policy.require(user, "provider.use", project, token)
    chosen = []
    for ref in refs:
        try:
            chosen.append(provider_selectors.usable_model(project, ref))
        except NotFound as exc:
            raise Invalid(exc.message, field="provider_models") from None
    if len({m.pk for m in chosen}) != len(chosen):
        raise Invalid("Each provider model may appear once.", field="provider_models")
    require_outside_allowed(project)
    return chosen


def _checked_models(user, project: Project, models, token, *, columns_left: int = MAX_MODELS) -> list[RegisteredModel]:
    if not isinstance(models, list):
        raise Invalid(f"Compare {MIN_MODELS} to {MAX_MODELS} models.", field="models")
    if not MIN_MODELS - (MAX_MODELS - columns_left) <= len(models) <= columns_left:
        raise Invalid(f"Compare {MIN_MODELS} to {MAX_MODELS} models, provider models included.", field="models")
    if len(set(map(str, models))) != len(models):
        raise Invalid("Each model may appear once.", field="models")
    visible = policy.visible_in_project(user, RegisteredModel, project, "model.view", token)
    chosen = []
    for ref in models:
        model = None
        if isinstance(ref, int) and not isinstance(ref, bool):
            model = visible.filter(pk=ref).select_related("base_model").first()
        if model is None:
            raise Invalid(f"No such model in this project: {str(ref)[:40]}.", field="models")
        if model.status != RegisteredModel.Status.READY:
            raise Invalid(f"The model “{model.name}” is {model.status}, not ready.", field="models")
        chosen.append(model)
    return chosen



def _typed_rows(prompts, references) -> list[tuple[str, str | None, None]]:
    if not isinstance(prompts, list):
        raise Invalid("Give the prompts as a list of texts.", field="prompts")
    texts = [p for p in prompts if isinstance(p, str) and p.strip()]
    if len(texts) != len(prompts) or not texts:
        raise Invalid("The prompt set is empty, or holds an empty prompt: give at least one non-empty prompt.",
                      field="prompts")
    if len(texts) > MAX_PROMPTS:
        raise Invalid(f"At most {MAX_PROMPTS} prompts per comparison.", field="prompts")
    if any(len(p) > MAX_PROMPT_CHARS for p in texts):
        raise Invalid(f"A prompt is at most {MAX_PROMPT_CHARS} characters.", field="prompts")
    if references is None:
        references = [None] * len(texts)
    if not isinstance(references, list) or len(references) != len(texts) or not all(
            r is None or isinstance(r, str) for r in references):
        raise Invalid("Give one reference (or null) per prompt.", field="references")
    return [(text, reference or None, None) for text, reference in zip(texts, references)]


def _sampled_rows(version: DatasetVersion, *, split: str, sample_size, seed) -> tuple[list, dict]:
    split = (split or "").strip()
    if not isinstance(sample_size, int) or isinstance(sample_size, bool) or not 1 <= sample_size <= MAX_PROMPTS:
        raise Invalid(f"Sample 1 to {MAX_PROMPTS} rows.", field="sample_size")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise Invalid("The seed is a whole number.", field="seed")
    rows = version.rows.exclude(Q(prompt__isnull=True) | Q(prompt=""))
    if split:
        if not version.rows.filter(split=split).exists():
            raise Invalid(f"Version {version.number} has no “{split}” split.", field="split")
        rows = rows.filter(split=split)
    positions = list(rows.order_by("position").values_list("position", flat=True))
    if not positions:
        raise Invalid("No row of that version has a prompt: the prompt set would be empty.", field="dataset_version")
    picked = sorted(random.Random(seed).sample(positions, min(sample_size, len(positions))))
    found = {row["position"]: row for row in version.rows.filter(position__in=picked).values(
        "position", "prompt", "reference", "response")}
    sampled = [(found[p]["prompt"][:MAX_PROMPT_CHARS], found[p]["reference"] or found[p]["response"] or None, p)
               for p in picked]
    return sampled, {"kind": "dataset", "dataset_version": version.pk, "dataset": version.dataset_id,
                     "version_number": version.number, "content_hash": version.content_hash, "split": split,
                     "sample_size": sample_size, "seed": seed}


def _params_json(sampling) -> dict:
    from dataclasses import asdict

    values = asdict(sampling)
    values["stop"] = list(values["stop"])
    return values


def _enqueue(comparison_id: int) -> None:
    def fail(reason: str) -> None:
        Comparison.objects.filter(pk=comparison_id).update(state=Comparison.State.FAILED, error=reason,
                                                           finished_at=timezone.now())

    enqueue(compare_task, comparison_id, queue="inference", on_failure=fail)


def comparison_cancel(*, user, comparison: Comparison, token=None, ip_address: str | None = None) -> Comparison:
    """A queued comparison ends at once; a running one stops after its current batch."""
    policy.require(user, "compare.run", comparison, token)
    with transaction.atomic():
        comparison = ask_to_cancel(Comparison, comparison.pk, what="comparison")
        audit_record(actor=user, action="comparison.cancel", project=comparison.project, target=comparison,
                     ip_address=ip_address)
    from apps.comparison import events

    events.comparison_state(comparison)
    return comparison


def comparison_delete(*, user, comparison: Comparison, token=None, ip_address: str | None = None) -> None:
    """Delete a comparison with its outputs and votes (a running one is cancelled first: its
    worker finds the row gone and stops)."""
    policy.require(user, "compare.run", comparison, token)
    with transaction.atomic():
        audit_record(actor=user, action="comparison.delete", project=comparison.project, target=comparison,
                     ip_address=ip_address, before={"name": comparison.name, "votes": comparison.votes.count()})
        comparison.delete()


# --- blind voting ---------------------------------------------------------------------------------

def pair_next(*, user, comparison: Comparison, token=None, rng: random.Random | None = None) -> Pair | None:
    """The pair this person should vote on next, or None when none is left. A pair served
    earlier and not yet voted on is served again (same sides), so a reload changes nothing;
    otherwise the least-voted (prompt, two models) this person has not seen is drawn, and
    left and right are drawn here, never by the client."""
    policy.require(user, "compare.vote", comparison, token)
    open_pair = (Pair.objects.filter(comparison=comparison, voter=user, vote__isnull=True)
                 .select_related("prompt").order_by("created_at", "id").first())
    if open_pair is not None:
        return open_pair
    rng = rng or random.SystemRandom()
    candidates = votable_pairs(comparison, exclude_voter=user)
    if not candidates:
        return None
    counts: dict[tuple[int, int, int], int] = {}
    for prompt_id, first_id, second_id in Pair.objects.filter(comparison=comparison, vote__isnull=False).values_list(
            "prompt_id", "first_id", "second_id"):
        counts[(prompt_id, first_id, second_id)] = counts.get((prompt_id, first_id, second_id), 0) + 1
    fewest = min(counts.get(c, 0) for c in candidates)
    prompt_id, first_id, second_id = rng.choice([c for c in candidates if counts.get(c, 0) == fewest])
    try:
        with transaction.atomic():
            return Pair.objects.create(comparison=comparison, voter=user, prompt_id=prompt_id, first_id=first_id,
                                       second_id=second_id, first_on_left=rng.random() < 0.5)
    except IntegrityError:  # the same person asked twice at once: serve the one that won
        return Pair.objects.filter(comparison=comparison, voter=user, vote__isnull=True).first()


def votable_pairs(comparison: Comparison, *, exclude_voter=None) -> list[tuple[int, int, int]]:
    """(prompt, first contestant, second contestant) for every two successful outputs of a
    prompt, minus the pairs `exclude_voter` was already served."""
    cells: dict[int, list[tuple[int, int]]] = {}
    for prompt_id, contestant_id, position in (Output.objects.filter(comparison=comparison, error="")
                                               .values_list("prompt_id", "contestant_id", "contestant__position")):
        cells.setdefault(prompt_id, []).append((position, contestant_id))
    served = set()
    if exclude_voter is not None:
        served = set(Pair.objects.filter(comparison=comparison, voter=exclude_voter)
                     .values_list("prompt_id", "first_id", "second_id"))
    pairs = []
    for prompt_id, entries in cells.items():
        entries.sort()
        for i in range(len(entries)):
            for j in range(i + 1, len(entries)):
                key = (prompt_id, entries[i][1], entries[j][1])
                if key not in served:
                    pairs.append(key)
    return pairs


def vote_cast(*, user, comparison: Comparison, pair_id, choice: str, client_id: str,
              token=None) -> tuple[Vote, bool]:
    """Record a vote on a pair served to this person. Returns (vote, created).

    The same vote sent again (a retry: same client id, or the same choice on the same pair)
    returns the first one; a different choice on a pair already voted on, or a client id
    already used for another vote, is refused with a Conflict. A pair that is not this
    person's, or not this comparison's, is NotFound."""
    policy.require(user, "compare.vote", comparison, token)
    if choice not in Vote.Choice.values:
        raise Invalid(f"choice is one of {', '.join(Vote.Choice.values)}.", field="choice")
    client_id = (client_id or "").strip()
    if not client_id or len(client_id) > 64:
        raise Invalid("client_id is a client-generated id (a UUID) of at most 64 characters.", field="client_id")
    try:
        pair = Pair.objects.select_related("first__model", "second__model").get(
            pk=int(pair_id), comparison=comparison, voter=user)
    except (Pair.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound("No such pair.") from None
    earlier = Vote.objects.filter(Q(pair=pair) | Q(voter=user, client_id=client_id)).first()
    if earlier is not None:
        return _replayed(earlier, pair, choice), False
    winner, loser = {"a": (pair.left, pair.right), "b": (pair.right, pair.left)}.get(choice, (None, None))
    try:
        with transaction.atomic():
            vote = Vote.objects.create(pair=pair, comparison=comparison, voter=user, choice=choice, winner=winner,
                                       loser=loser, client_id=client_id)
            audit_record(actor=user, action="comparison.vote", project=comparison.project, target=comparison,
                         publish=False, after={"pair": pair.pk, "choice": choice})
    except IntegrityError:  # a concurrent retry won the race
        earlier = Vote.objects.filter(Q(pair=pair) | Q(voter=user, client_id=client_id)).first()
        if earlier is None:
            raise
        return _replayed(earlier, pair, choice), False
    return vote, True


def _replayed(earlier: Vote, pair: Pair, choice: str) -> Vote:
    if earlier.pair_id != pair.pk:
        raise Conflict("This client_id was used for a vote on another pair.")
    if earlier.choice != choice:
        raise Conflict(f"You already voted on this pair ({earlier.get_choice_display()}); "
                       "a vote cannot be changed.")
    return earlier


# --- export ---------------------------------------------------------------------------------------

def votes_export(*, user, comparison: Comparison, dataset: int | None = None, dataset_name: str = "", token=None,
                 ip_address: str | None = None) -> DatasetVersion:
    """The decisive votes (A or B; ties and both-bad name no preferred answer) as a new
    version of a preference dataset: one row per vote with prompt, chosen (the row's
    response), rejected, chosen_model, rejected_model (ids and names), voter and vote ids.
    Into an existing dataset of the project (`dataset`), or a new one called `dataset_name`."""
    from apps.datasets.writer import write_version
    from workers.ingest import IngestError

    policy.require(user, "compare.view", comparison, token)
    policy.require(user, "dataset.import", comparison.project, token)
    votes = list(comparison.votes.exclude(winner=None).select_related(
        "pair__prompt", "winner__model", "loser__model", "winner__provider_model__provider",
        "loser__provider_model__provider", "voter").order_by("id"))
    if not votes:
        raise Invalid("No vote prefers one answer yet: there is nothing to export.", field="comparison")
    outputs = {(o.prompt_id, o.contestant_id): o.text for o in comparison.outputs.all()}
    records = [{
        "prompt": vote.pair.prompt.text,
        "chosen": outputs.get((vote.pair.prompt_id, vote.winner_id), ""),
        "rejected": outputs.get((vote.pair.prompt_id, vote.loser_id), ""),
        "chosen_model": entrant(vote.winner).pk, "chosen_model_name": vote.winner.name,
        "rejected_model": entrant(vote.loser).pk, "rejected_model_name": vote.loser.name,
        "voter": vote.voter_id, "voter_name": vote.voter.username, "vote": vote.pk, "comparison": comparison.pk,
    } for vote in votes]
    with transaction.atomic():
        target = _export_dataset(user, comparison.project, dataset, dataset_name, token)
        try:
            version = write_version(
                dataset=target, records=records, roles={"prompt": "prompt", "chosen": "response"}, author=user,
                parent=target.versions.filter(status=DatasetVersion.Status.READY).order_by("-number").first(),
                message=f"{len(records)} preference votes from comparison “{comparison.name}”",
                source={"kind": "comparison_votes", "comparison": comparison.pk, "votes": len(records)})
        except IngestError as exc:
            raise Invalid(f"The votes could not be written: {exc}", field="comparison") from None
        audit_record(actor=user, action="comparison.export", project=comparison.project, target=comparison,
                     ip_address=ip_address, after={"dataset": target.pk, "version": version.number,
                                                   "votes": len(records)})
    return version


def _export_dataset(user, project: Project, dataset_id, dataset_name: str, token) -> Dataset:
    if dataset_id is not None:
        try:
            return policy.get_object(user, Dataset, dataset_id, "dataset.view", token, project_id=project.pk)
        except NotFound:
            raise Invalid("No such dataset in this project.", field="dataset") from None
    name = " ".join((dataset_name or "").split())
    if not name or len(name) > 120:
        raise Invalid("Name the dataset to export into (at most 120 characters), or pick an existing one.",
                      field="dataset_name")
    if Dataset.all_objects.filter(project=project, name__iexact=name).exists():
        raise Invalid(f"A dataset called “{name}” already exists: pick it instead.", field="dataset_name")
    return Dataset.objects.create(project=project, name=name, created_by=user,
                                  description="Preference votes exported from comparisons.")
