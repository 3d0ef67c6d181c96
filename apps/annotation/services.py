"""Annotation: schemas, campaigns, the work queue, submissions, review and adjudication.

Every function takes the acting principal and checks it through the policy layer. Being "in"
a campaign means holding `annotation.submit` on its project and being assigned to it (all
project annotators, or by name); anyone else gets 404, as for an object they cannot see.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from apps.annotation import events, queue
from apps.annotation import schema as schema_rules
from apps.annotation.field_types import field_type
from apps.annotation.models import Annotation, AnnotationExport, Campaign, Draft, Item, LabelSchema, SuggestionRun
from apps.annotation.tasks import annotation_export_task, suggest_task
from apps.core.errors import Conflict, Invalid, NotFound
from apps.datasets.models import DatasetRow
from apps.datasets.selectors import readable_version, with_metadata
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Membership, Project
from apps.serving.services import classifier_labels, is_classifier, is_multi_label_classifier

MAX_OVERLAP = 10
MAX_ITEMS = 1_000_000
MAX_COMMENT = 5000
LEASE_RANGE_S = (30, 86_400)


class StaleEdit(Conflict):
    """An edit based on an old revision: the answer carries the current one."""

    def __init__(self, annotation: Annotation):
        super().__init__(f"This annotation was changed since you loaded it (now revision {annotation.revision}); "
                         "reload it and apply your change again.")
        self.extra = {"current": annotation_payload(annotation)}


class LeaseLost(Conflict):
    """A late submission for an item that no longer needs one: the answer is kept as a draft."""

    def __init__(self):
        super().__init__("This item already has all the annotations it needs (your time on it ran out and "
                         "someone else answered it); your answer is kept as a draft.")


# --- schemas ----------------------------------------------------------------------------------

def schema_create(*, user, project: Project, name: str, fields, token=None, ip_address=None) -> LabelSchema:
    policy.require(user, "campaign.manage", project, token)
    name = _name(name)
    schema = LabelSchema.objects.create(project=project, name=name, fields=schema_rules.validate_schema(fields),
                                        created_by=user)
    audit_record(actor=user, action="label_schema.create", project=project, target=schema, ip_address=ip_address,
                 after={"name": name, "version": 1})
    return schema


def schema_update(*, user, schema: LabelSchema, fields, token=None, ip_address=None) -> LabelSchema:
    """Edit in place while nothing was answered with it; afterwards a new version that the
    campaigns using this one move to (existing answers keep pointing at the version they answered)."""
    policy.require(user, "campaign.manage", schema.project, token)
    fields = schema_rules.validate_schema(fields)
    with transaction.atomic():
        schema = LabelSchema.objects.select_for_update().get(pk=schema.pk)
        if schema.children.exists():
            raise Conflict(f"{schema} was already superseded; edit its newest version.")
        if not Annotation.objects.filter(schema=schema).exists():
            schema.fields = fields
            schema.save(update_fields=["fields"])
            updated = schema
        else:
            updated = LabelSchema.objects.create(project=schema.project, name=schema.name, version=schema.version + 1,
                                                 parent=schema, fields=fields, created_by=user)
            Campaign.objects.filter(schema=schema).update(schema=updated)
    audit_record(actor=user, action="label_schema.update", project=schema.project, target=updated,
                 ip_address=ip_address, after={"version": updated.version})
    return updated


def _name(name) -> str:
    if not isinstance(name, str) or not name.strip():
        raise Invalid("a name is required", field="name")
    if len(name) > 120:
        raise Invalid("at most 120 characters", field="name")
    return name.strip()


# --- campaigns --------------------------------------------------------------------------------

def campaign_create(*, user, project: Project, name: str, dataset_version_id, schema_id, guidelines: str = "",
                    overlap: int = 1, assignees: list[str] | None = None, due_at=None, lease_seconds: int = 600,
                    split: str = "", label: str = "", sample: int | None = None, seed: int = 0,
                    meta_key: str = "", meta_value: str = "", suggestion_model_id=None,
                    order: str = Campaign.Order.DEFAULT, token=None, ip_address=None) -> Campaign:
    policy.require(user, "campaign.manage", project, token)
    name = _name(name)
    version = readable_version(user, project, dataset_version_id, token)
    schema = LabelSchema.objects.filter(pk=_id(schema_id, "schema"), project=project, children__isnull=True).first()
    if schema is None:
        raise Invalid("no such label schema in this project (or not its newest version)", field="schema")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 1 <= overlap <= MAX_OVERLAP:
        raise Invalid(f"overlap is a whole number from 1 to {MAX_OVERLAP}", field="overlap")
    if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int) or not (
            LEASE_RANGE_S[0] <= lease_seconds <= LEASE_RANGE_S[1]):
        raise Invalid(f"lease_seconds is from {LEASE_RANGE_S[0]} to {LEASE_RANGE_S[1]}", field="lease_seconds")
    if not isinstance(guidelines, str) or len(guidelines) > 50_000:
        raise Invalid("guidelines are Markdown text of at most 50,000 characters", field="guidelines")
    if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 1):
        raise Invalid("sample is a positive number of examples", field="sample")
    people = _annotators(project, assignees)
    suggestion_model = None
    if suggestion_model_id not in (None, ""):
        from apps.registry.models import RegisteredModel

        suggestion_model = policy.visible_in_project(user, RegisteredModel, project, "model.view", token).filter(
            pk=_id(suggestion_model_id, "suggestion_model")).first()
        if suggestion_model is None:
            raise Invalid("no such model in this project", field="suggestion_model")
        if is_classifier(suggestion_model):
            classifier_fields(suggestion_model, schema.fields)  # refused here rather than in the worker
    elif any(field_type(field).fills_from_model_response(field) for field in schema.fields):
        raise Invalid("this form starts its text from the model's suggestions: choose the model",
                      field="suggestion_model")
    if order not in Campaign.Order.values:
        raise Invalid(f"order is one of {', '.join(Campaign.Order.values)}", field="order")
    if order == Campaign.Order.UNCERTAIN_FIRST and not (suggestion_model and is_classifier(suggestion_model)):
        raise Invalid("least confident first orders items by a classifier's confidence: choose a classifier as "
                      "the suggestion model", field="order")
    rows = DatasetRow.objects.filter(version=version)
    if split:
        rows = rows.filter(split=split)
    if label:
        rows = rows.filter(label=label)
    if meta_key:
        if meta_key not in version.schema.get("metadata_keys", []):
            raise Invalid(f"Version {version.number} has no metadata field {meta_key[:100]!r}.", field="meta_key")
        rows = with_metadata(rows, meta_key, meta_value)
    with transaction.atomic():
        campaign = Campaign.objects.create(
            project=project, name=name, dataset_version=version, schema=schema, guidelines=guidelines,
            overlap=overlap, assignment=Campaign.Assignment.NAMED if people else Campaign.Assignment.ALL,
            due_at=due_at, lease_seconds=lease_seconds, suggestion_model=suggestion_model, order=order,
            created_by=user,
            selection={"split": split, "label": label, "meta_key": meta_key, "meta_value": meta_value,
                       "sample": sample, "seed": seed})
        if people:
            campaign.assignees.set(people)
        campaign.item_count = _create_items(campaign, rows, sample, seed)
        if campaign.item_count == 0:
            raise Invalid("no rows of the version match this selection",
                          field="split" if split else "meta_key" if meta_key else "label")
        if suggestion_model is not None:
            SuggestionRun.objects.create(campaign=campaign)
        campaign.save(update_fields=["item_count"])
    audit_record(actor=user, action="campaign.create", project=project, target=campaign, ip_address=ip_address,
                 after={"items": campaign.item_count, "overlap": overlap})
    if suggestion_model is not None:
        transaction.on_commit(lambda: _enqueue_suggestions(campaign.pk))
    return campaign


def classifier_fields(model, fields: list[dict]) -> list[str]:
    """The names of the form's fields that the classifier adapter `model` suggests answers for: those
    whose labels are its classes (in any order), single-label fields for a classifier of one class per
    text, multi-label ones for a multi-label classifier. Invalid, naming the labels that differ, when none is
    or when the form starts a text from the model's response (a classifier writes none)."""
    classes = classifier_labels(model)
    writes = [f["name"] for f in fields if field_type(f).fills_from_model_response(f)]
    if writes:
        raise Invalid(f"the classifier “{model.name}” writes no text, and this form starts '{writes[0]}' from the "
                      "model's response: choose a generative model", field="suggestion_model")
    multi_label = is_multi_label_classifier(model)
    labelled = [(f["name"], labels) for f in fields
                if (labels := field_type(f).classifier_labels(f)) is not None
                and field_type(f).multi_label_classes == multi_label]
    if not labelled:
        kind = "lists of labels, and this form has no multi-label" if multi_label else "one label, and this form has no single-label"
        raise Invalid(f"the classifier “{model.name}” suggests {kind} field", field="suggestion_model")
    matching = [name for name, labels in labelled if set(labels) == set(classes)]
    if matching:
        return matching

    def listed(values) -> str:
        return ", ".join(f"'{value}'" for value in values)

    differences = []
    for name, labels in labelled:
        extra, missing = [c for c in classes if c not in labels], [label for label in labels if label not in classes]
        parts = ([f"the classifier has {listed(extra)}, which '{name}' lacks"] if extra else []) + (
            [f"'{name}' has {listed(missing)}, which the classifier lacks"] if missing else [])
        differences.append("; ".join(parts))
    raise Invalid(f"the classifier “{model.name}”'s labels ({listed(classes)}) do not match the form's: "
                  f"{' / '.join(differences)}", field="suggestion_model")


def _id(value, field: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise Invalid("an id is required", field=field) from None


def _annotators(project: Project, usernames) -> list:
    if not usernames:
        return []
    if not isinstance(usernames, list) or not all(isinstance(u, str) for u in usernames):
        raise Invalid("assignees is a list of usernames", field="assignees")
    members = {m.user.username: m for m in Membership.objects.filter(project=project, user__username__in=usernames)
               .select_related("user", "custom_role")}
    for username in usernames:
        member = members.get(username)
        if member is None:
            raise Invalid(f"'{username}' is not a member of this project", field="assignees")
        if "annotation.submit" not in member.permission_set:
            raise Invalid(f"'{username}' may not annotate in this project (no annotation.submit)", field="assignees")
    return [m.user for m in members.values()]


def _create_items(campaign: Campaign, rows, sample: int | None, seed: int) -> int:
    """Items for the selected rows, in one INSERT … SELECT (or a seeded sample of ids)."""
    if sample is not None:
        ids = list(rows.order_by("position").values_list("id", flat=True))
        chosen = sorted(random.Random(seed).sample(ids, min(sample, len(ids))))
        Item.objects.bulk_create([Item(campaign=campaign, row_id=row_id, position=i) for i, row_id in
                                  enumerate(chosen)], batch_size=5000)
        return len(chosen)
    count = rows.count()
    if count > MAX_ITEMS:
        raise Invalid(f"a campaign holds at most {MAX_ITEMS:,} examples; take a sample", field="sample")
    sql, params = rows.order_by().values_list("id", "position").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO annotation_item (campaign_id, row_id, position, completed, is_gold) "
            f"SELECT %s, id, ROW_NUMBER() OVER (ORDER BY position) - 1, 0, %s FROM ({sql}) AS selected",
            [campaign.pk, False, *params])
    return count


def _enqueue_suggestions(campaign_id: int) -> None:
    from apps.core.jobs import enqueue
    def fail(reason: str) -> None:
        SuggestionRun.objects.filter(pk=campaign_id).update(state=SuggestionRun.State.FAILED, error=reason,
                                                            finished_at=timezone.now())

    enqueue(suggest_task, campaign_id, queue="inference", on_failure=fail)


def campaign_close(*, user, campaign: Campaign, token=None, ip_address=None) -> Campaign:
    policy.require(user, "campaign.manage", campaign, token)
    campaign.state = Campaign.State.CLOSED
    campaign.save(update_fields=["state"])
    audit_record(actor=user, action="campaign.close", project=campaign.project, target=campaign,
                 ip_address=ip_address)
    return campaign


def suggestions_stop(*, user, campaign: Campaign, token=None, ip_address=None) -> Campaign:
    """Stop the model suggestions: a queued job never starts, a running one ends after its chunk
    (items already suggested keep theirs). Annotating goes on."""
    policy.require(user, "campaign.manage", campaign, token)
    stopped = SuggestionRun.objects.filter(
        pk=campaign.pk, state__in=(SuggestionRun.State.QUEUED, SuggestionRun.State.RUNNING)).update(
        state=SuggestionRun.State.CANCELLED, finished_at=timezone.now())
    if not stopped:
        raise Conflict("No model suggestions are being made for this campaign.")
    audit_record(actor=user, action="campaign.suggestions_stop", project=campaign.project, target=campaign,
                 ip_address=ip_address)
    transaction.on_commit(lambda: events.campaign_changed(campaign.pk))
    campaign.refresh_from_db()
    return campaign


def visible_campaigns(user, project: Project, token=None):
    """Campaign managers and reviewers see every campaign; annotators the ones they are in."""
    permissions = policy.project_permissions(user, project, token)
    campaigns = Campaign.objects.filter(project=project).select_related("suggestion_run")
    if permissions & {"campaign.manage", "annotation.review"}:
        return campaigns
    if "annotation.submit" in permissions:
        return campaigns.filter(Q(assignment=Campaign.Assignment.ALL) | Q(assignees=user)).distinct()
    return campaigns.none()


def with_progress(campaigns, user) -> list[tuple[Campaign, dict]]:
    """Campaigns with their progress and the person's, counted in the same query (for lists)."""
    answered = Q(items__annotations__skipped=False)
    rows = campaigns.annotate(annotation_total=Count("items__annotations", filter=answered),
                              mine=Count("items__annotations", filter=answered & Q(items__annotations__annotator=user)))
    return [(c, {"items": c.item_count, "annotations": c.annotation_total, "mine": c.mine,
                 "annotations_needed": c.item_count * c.overlap}) for c in rows]


def visible_campaign(user, campaign_id, token=None) -> Campaign:
    """One campaign to look at: managers and reviewers see any of their project's, annotators the
    ones they are in (anyone else: NotFound)."""
    campaign = get_campaign(user, campaign_id, "project.view", token)
    if policy.project_permissions(user, campaign.project, token) & {"campaign.manage", "annotation.review"}:
        return campaign
    return get_campaign(user, campaign_id, "annotation.submit", token)


def get_campaign(user, campaign_id, permission: str, token=None) -> Campaign:
    """A campaign for a principal; for annotation.submit they must also be assigned to it."""
    # With its project and schema (answering and showing an item need it), read by hand: every
    # annotating request starts here. Whether the principal may see it is the policy's answer.
    campaign = queue.campaign(campaign_id)
    if campaign is None:
        raise NotFound()
    policy.require(user, "project.view", campaign, token)
    permissions = policy.project_permissions(user, campaign.project, token)
    if permission == "annotation.submit":
        if "annotation.submit" not in permissions or not is_assigned(user, campaign):
            raise NotFound()
    else:
        policy.require(user, permission, campaign, token)
    return campaign


def is_assigned(user, campaign: Campaign) -> bool:
    return campaign.assignment == Campaign.Assignment.ALL or campaign.assignees.filter(pk=user.pk).exists()


# --- the queue --------------------------------------------------------------------------------

def next_item(*, user, campaign: Campaign) -> Item | None:
    """The item this annotator should do next: one they hold a live lease on, else the one with
    the fewest completed annotations (then the least confident suggestion, for a campaign ordered
    so, then the earliest) that they have not done and that is not leased to enough others; leased to them for the campaign's lease time (`item.lease_expires_at`).
    None when nothing is left for them."""
    if campaign.state != Campaign.State.ACTIVE:
        raise Conflict("This campaign is closed.")
    now = timezone.now()
    expires = now + _lease(campaign)
    with transaction.atomic():
        held = queue.held_item(campaign.pk, user.pk, now)
        if held is not None:
            queue.lease(held.pk, user.pk, expires)
            held.lease_expires_at = expires
            return held
        passed: list[int] = []
        for _ in range(LEASE_TRIES):
            item = queue.candidate(campaign.pk, campaign.overlap, user.pk, now, passed,
                                   uncertain_first=campaign.order == Campaign.Order.UNCERTAIN_FIRST)
            if item is None:
                return None
            # The candidate query saw leases as of its statement's start: one that another annotator
            # committed after that, before this row was locked, is invisible to it (SKIP LOCKED skips
            # only rows locked now, and the row itself did not change). A new statement sees every
            # committed lease; the row lock keeps new ones away until this transaction ends.
            if item.completed + queue.leased_to_others(item.pk, user.pk, now) < campaign.overlap:
                queue.lease(item.pk, user.pk, expires)
                item.lease_expires_at = expires
                return item
            passed.append(item.pk)
    raise Conflict("Many annotators are taking items at this moment; ask for the next item again.")


LEASE_TRIES = 20


def _lease(campaign: Campaign) -> timedelta:
    return timedelta(seconds=campaign.lease_seconds)


def get_item(campaign: Campaign, item_id) -> Item:
    item = queue.item(campaign.pk, item_id)
    if item is None:
        raise NotFound()
    return item


def row_dict(row: DatasetRow) -> dict:
    return {"prompt": row.prompt, "response": row.response, "messages": row.messages, "label": row.label,
            "reference": row.reference, "metadata": row.metadata, "ext_id": row.ext_id}


def _comment(comment) -> str:
    if comment is None:
        return ""
    if not isinstance(comment, str):
        raise Invalid("a comment is text", field="comment")
    if len(comment) > MAX_COMMENT:
        raise Invalid(f"a comment is at most {MAX_COMMENT} characters", field="comment")
    return comment


def _client_id(value) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        raise Invalid("client_id is a UUID made by the client for this submission", field="client_id") from None


def submit(*, user, campaign: Campaign, item: Item, client_id, values=None, comment: str = "",
           time_spent_ms: int | None = None, skipped: bool = False) -> tuple[Annotation, bool]:
    """Record an answer (or a skip). Returns (annotation, created). A retry with the same
    client_id returns the first answer. A submission after the lease expired is accepted while
    the item still needs annotations; otherwise LeaseLost, with the answer saved as a draft."""
    client_id = _client_id(client_id)
    answered = queue.answered_with(user.pk, client_id)
    if answered is not None:
        if answered != item.pk:
            raise Invalid("this client_id was already used for another item", field="client_id")
        return Annotation.objects.get(annotator=user, client_id=client_id), False
    if campaign.state != Campaign.State.ACTIVE:
        raise Conflict("This campaign is closed.")
    comment = _comment(comment)
    if time_spent_ms is not None and (isinstance(time_spent_ms, bool) or not isinstance(time_spent_ms, int)
                                      or not 0 <= time_spent_ms <= 86_400_000):
        raise Invalid("time_spent_ms is a whole number of milliseconds (up to a day)", field="time_spent_ms")
    schema = campaign.schema
    clean = {} if skipped else schema_rules.validate_answer(schema.fields, values, row_dict(item.row))
    try:
        with transaction.atomic():
            completed = queue.lock_item(item.pk)
            previous = queue.previous_answer(item.pk, user.pk)
            if previous is not None and not previous[1]:
                raise Conflict("You already annotated this item; edit your annotation instead.")
            if not skipped and completed >= campaign.overlap:
                raise LeaseLost()  # done by others meanwhile (a lease that expired and went to someone else)
            if previous is not None:  # a skipped item, now answered
                Annotation.objects.filter(pk=previous[0]).delete()
            annotation = Annotation.objects.create(
                item=item, annotator=user, schema=schema, client_id=client_id, skipped=skipped, values=clean,
                comment=comment, suggestion=item.suggestion, time_spent_ms=time_spent_ms)
            if not skipped:
                queue.count_answer(item.pk)
            queue.release(item.pk, user.pk)
            audit_record(actor=user, action="annotation.skip" if skipped else "annotation.submit",
                         project=campaign.project, target=annotation, publish=False,
                         after={"campaign": campaign.pk, "item": item.pk})
    except LeaseLost:
        draft_save(user=user, campaign=campaign, item=item, values=values or {}, comment=comment, check=False)
        raise
    except IntegrityError:
        # The same client_id raced itself (two tabs, a retry mid-flight): the first one won.
        existing = Annotation.objects.filter(annotator=user, client_id=client_id).first()
        if existing is None:
            raise Conflict("You already annotated this item; edit your annotation instead.") from None
        return existing, False
    if not skipped:  # the campaign's count moved: its open dashboards count again
        transaction.on_commit(lambda: events.campaign_changed(campaign.pk))
    return annotation, True


def edit(*, user, annotation: Annotation, revision, values=None, comment=None) -> Annotation:
    """Change one's own answer. `revision` is the one the client loaded: a stale one gets 409
    with the current value (optimistic concurrency; no lock held while a person types)."""
    if annotation.annotator_id != user.pk:
        raise NotFound()
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise Invalid("revision (the one you loaded) is required", field="revision")
    changes = {}
    if values is not None:
        changes["values"] = schema_rules.validate_answer(annotation.schema.fields, values,
                                                         row_dict(annotation.item.row))
        changes["skipped"] = False
    if comment is not None:
        changes["comment"] = _comment(comment)
    with transaction.atomic():
        updated = Annotation.objects.filter(pk=annotation.pk, revision=revision).update(
            revision=F("revision") + 1, updated_at=timezone.now(), **changes)
        if not updated:
            raise StaleEdit(Annotation.objects.get(pk=annotation.pk))
        if annotation.skipped and values is not None:
            Item.objects.filter(pk=annotation.item_id).update(completed=F("completed") + 1)
        if values is not None:  # the count or the agreement moved: the open dashboards count again
            transaction.on_commit(lambda: events.campaign_changed(annotation.item.campaign_id))
        audit_record(actor=user, action="annotation.edit", project=annotation.item.campaign.project, target=annotation,
                     publish=False, after={"revision": revision + 1, "fields": sorted(changes)})
    annotation.refresh_from_db()
    return annotation


def draft_save(*, user, campaign: Campaign, item: Item, values, comment: str = "", check: bool = True) -> Draft:
    if check:
        values = schema_rules.validate_answer(campaign.schema.fields, values, row_dict(item.row), partial=True)
        comment = _comment(comment)
    draft, _ = Draft.objects.update_or_create(item=item, annotator=user,
                                              defaults={"values": values, "comment": comment})
    return draft


def progress(campaign: Campaign, user=None) -> dict:
    """The campaign's progress (for its pages; it counts the campaign's annotations) and, with a
    user, theirs."""
    submitted = Annotation.objects.filter(item__campaign=campaign, skipped=False)
    result = {"items": campaign.item_count,
              # An index range scan of (campaign, completed, position): it grows with the done items only.
              "items_done": Item.objects.filter(campaign=campaign, completed__gte=campaign.overlap).count(),
              "annotations": submitted.count(), "annotations_needed": campaign.item_count * campaign.overlap}
    if user is not None:
        result.update(my_progress(campaign, user))
    return result


def my_progress(campaign: Campaign, user) -> dict:
    """What an annotator has done here: cheap enough to send with every item."""
    return queue.my_counts(campaign.pk, user.pk)


# --- review -----------------------------------------------------------------------------------

REVIEW_DECISIONS = ("accept", "reject", "correct")


def review(*, user, annotation: Annotation, decision: str, comment: str = "", values=None, token=None) -> Annotation:
    policy.require(user, "annotation.review", annotation.item.campaign, token)
    if decision not in REVIEW_DECISIONS:
        raise Invalid(f"decision is one of {', '.join(REVIEW_DECISIONS)}", field="decision")
    comment = _comment(comment)
    if decision == "reject" and not comment:
        raise Invalid("say why when you reject", field="comment")
    corrected = None
    if decision == "correct":
        corrected = schema_rules.validate_answer(annotation.schema.fields, values, row_dict(annotation.item.row))
    annotation.review = {"accept": Annotation.Review.ACCEPTED, "reject": Annotation.Review.REJECTED,
                         "correct": Annotation.Review.CORRECTED}[decision]
    annotation.review_comment, annotation.reviewed_values = comment, corrected
    annotation.reviewed_by, annotation.reviewed_at = user, timezone.now()
    with transaction.atomic():
        annotation.save(update_fields=["review", "review_comment", "reviewed_values", "reviewed_by", "reviewed_at"])
        audit_record(actor=user, action=f"annotation.review_{decision}", project=annotation.item.campaign.project,
                     target=annotation, after={"annotator": annotation.annotator_id, "decision": decision})
    return annotation


def adjudicate(*, user, item: Item, values, token=None) -> Item:
    """The reviewer's final answer for an example, used over the vote when exporting."""
    policy.require(user, "annotation.review", item.campaign, token)
    item.adjudicated_values = schema_rules.validate_answer(item.campaign.schema.fields, values, row_dict(item.row))
    item.adjudicated_by, item.adjudicated_at = user, timezone.now()
    with transaction.atomic():
        item.save(update_fields=["adjudicated_values", "adjudicated_by", "adjudicated_at"])
        audit_record(actor=user, action="annotation.adjudicate", project=item.campaign.project, target=item,
                     after={"campaign": item.campaign_id})
    return item


def set_gold(*, user, item: Item, values, token=None) -> Item:
    policy.require(user, "campaign.manage", item.campaign, token)
    if values is None:
        item.is_gold, item.gold_values = False, None
    else:
        item.gold_values = schema_rules.validate_answer(item.campaign.schema.fields, values, row_dict(item.row))
        item.is_gold = True
    with transaction.atomic():
        item.save(update_fields=["is_gold", "gold_values"])
        audit_record(actor=user, action="annotation.gold_set" if item.is_gold else "annotation.gold_unset",
                     project=item.campaign.project, target=item, after={"campaign": item.campaign_id})
        transaction.on_commit(lambda: events.campaign_changed(item.campaign_id))  # gold accuracy moved
    return item


def annotation_payload(annotation: Annotation) -> dict:
    return {"id": annotation.pk, "item": annotation.item_id, "annotator": annotation.annotator.username,
            "values": annotation.values, "comment": annotation.comment, "skipped": annotation.skipped,
            "revision": annotation.revision, "review": annotation.review, "review_comment": annotation.review_comment,
            "reviewed_values": annotation.reviewed_values, "suggestion": annotation.suggestion,
            "time_spent_ms": annotation.time_spent_ms, "schema_version": annotation.schema.version,
            "created_at": annotation.created_at.isoformat(), "updated_at": annotation.updated_at.isoformat()}


# --- exports ----------------------------------------------------------------------------------

def export_start(*, user, campaign: Campaign, kind: str = "resolved", mode: str = "majority",
                 min_agreement=None, dataset_id=None, new_dataset_name: str = "", message: str = "", token=None,
                 ip_address=None) -> AnnotationExport:
    """Queue a worker job that writes the campaign's resolved answers as a new dataset version:
    of `dataset_id`, of a new dataset named `new_dataset_name`, or else of the campaign's own
    dataset (preferences always go to another dataset: their rows have another shape)."""
    from apps.annotation.exports import KINDS, MODES
    from apps.datasets.models import Dataset

    policy.require(user, "campaign.manage", campaign, token)
    policy.require(user, "dataset.import", campaign.project, token)
    if kind not in KINDS:
        raise Invalid(f"kind is one of {', '.join(KINDS)}", field="kind")
    if mode not in MODES:
        raise Invalid(f"mode is one of {', '.join(MODES)}", field="mode")
    if min_agreement is not None and (isinstance(min_agreement, bool) or not isinstance(min_agreement, (int, float))
                                      or not 0 <= min_agreement <= 1):
        raise Invalid("min_agreement is a share from 0 to 1", field="min_agreement")
    if kind == "preferences" and not any(field_type(f).teaches_preferences for f in campaign.schema.fields):
        raise Invalid("this campaign's schema has no preference or ranking field", field="kind")
    if not isinstance(message, str) or len(message) > 500:
        raise Invalid("a message is at most 500 characters", field="message")
    dataset = None
    if dataset_id not in (None, ""):
        dataset = Dataset.objects.filter(pk=_id(dataset_id, "dataset"), project=campaign.project).first()
        if dataset is None:
            raise Invalid("no such dataset in this project", field="dataset")
    elif new_dataset_name:
        new_dataset_name = _name(new_dataset_name)
    elif kind == "resolved":
        dataset = campaign.dataset_version.dataset
    else:
        new_dataset_name = f"{campaign.name} preferences"[:120]
    export = AnnotationExport.objects.create(
        campaign=campaign, kind=kind, mode=mode, min_agreement=min_agreement, dataset=dataset,
        new_dataset_name=new_dataset_name if dataset is None else "", message=message, created_by=user)
    audit_record(actor=user, action="campaign.export", project=campaign.project, target=campaign,
                 ip_address=ip_address, after={"export": export.pk, "kind": kind, "mode": mode})
    transaction.on_commit(lambda: _enqueue_export(export.pk))
    return export


def _enqueue_export(export_id: int) -> None:
    from apps.core.jobs import enqueue
    def fail(reason: str) -> None:
        AnnotationExport.objects.filter(pk=export_id).update(state=AnnotationExport.State.FAILED, error=reason)

    enqueue(annotation_export_task, export_id, queue="default", on_failure=fail)
