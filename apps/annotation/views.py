"""Annotation pages: campaigns, the annotator's page, review, and the campaign dashboard.
The annotator's page is driven by static/js/annotate.js through the API; the others are
server-rendered forms over the same services."""

from django import forms as django_forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from apps.annotation import quality, selectors, services
from apps.annotation.field_types import LABEL_KEYS
from apps.annotation.forms import CampaignForm, ExportForm
from apps.annotation.models import Annotation, Campaign, LabelSchema
from apps.core.errors import Conflict, Invalid, NotFound
from apps.core.http import client_ip
from apps.core.rendering import render_markdown
from apps.datasets.models import Dataset, DatasetVersion
from apps.projects import policy
from apps.projects.models import Membership
from apps.registry.models import RegisteredModel


def _context(request, project, **extra) -> dict:
    request.nav_section = "annotation"
    return {"project": project, "perms": policy.project_permissions(request.user, project), "tab": "annotation",
            **extra}


def _campaign(request, project_id, campaign_id, permission: str) -> Campaign:
    campaign = services.get_campaign(request.user, campaign_id, permission)
    if campaign.project_id != int(project_id):
        raise NotFound()
    return campaign


def _visible_campaign(request, project_id, campaign_id) -> Campaign:
    campaign = services.visible_campaign(request.user, campaign_id)
    if campaign.project_id != int(project_id):
        raise NotFound()
    return campaign


@login_required
def all_campaigns(request: HttpRequest) -> HttpResponse:
    """The campaigns I work or run, across my projects."""
    request.nav_section = "annotation"
    rows = []
    for project in policy.visible_projects(request.user):
        campaigns = services.visible_campaigns(request.user, project).select_related("project")[:100]
        rows += services.with_progress(campaigns, request.user)
    return render(request, "annotation/all.html", {"rows": rows})


@login_required
def campaign_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id)
    campaigns = services.visible_campaigns(request.user, project).select_related("schema", "dataset_version__dataset")
    rows = services.with_progress(campaigns[:200], request.user)
    return render(request, "annotation/list.html", _context(request, project, rows=rows))


@login_required
@require_http_methods(["GET", "POST"])
def campaign_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = policy.get_project(request.user, project_id, "campaign.manage")
    datasets = policy.visible_in_project(request.user, Dataset, project, "dataset.view")
    versions = (DatasetVersion.objects.filter(dataset__in=datasets, status=DatasetVersion.Status.READY)
                .select_related("dataset").order_by("dataset__name", "-number"))
    schemas = LabelSchema.objects.filter(project=project, children__isnull=True)
    annotators = [m.user for m in Membership.objects.filter(project=project).select_related("user", "custom_role")
                  if "annotation.submit" in m.permission_set]
    models = policy.visible_in_project(request.user, RegisteredModel, project, "model.view").filter(
        status=RegisteredModel.Status.READY).order_by("name")
    form = CampaignForm(request.POST or None, versions=versions, schemas=schemas, annotators=annotators,
                        models=models)
    if request.method == "POST" and form.is_valid():
        try:
            kind, value = form.schema_choice()
            ip = client_ip(request)
            data = form.cleaned_data
            # One transaction: a campaign refused leaves no form behind (a preset saved for it).
            with transaction.atomic():
                if kind == "fields":
                    name, fields = value
                    schema_id = services.schema_create(user=request.user, project=project, name=name,
                                                       fields=fields, ip_address=ip).pk
                else:
                    schema_id = value
                campaign = services.campaign_create(
                    user=request.user, project=project, name=data["name"],
                    dataset_version_id=data["dataset_version"], schema_id=schema_id, guidelines=data["guidelines"],
                    overlap=data["overlap"], assignees=data["assignees"], due_at=data["due_at"],
                    lease_seconds=data["lease_seconds"], split=data["split"], label=data["label"],
                    sample=data["sample"], seed=data["seed"] or 0, meta_key=data["meta_key"],
                    meta_value=data["meta_value"], suggestion_model_id=data["suggestion_model"],
                    order=data["order"], ip_address=ip)
            messages.success(request, f"Campaign “{campaign.name}” created with {campaign.item_count} examples.")
            return redirect("annotation:detail", project_id=project.pk, campaign_id=campaign.pk)
        except django_forms.ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field, errors)
        except (Invalid, Conflict) as exc:
            form.add_error(form.field_for(exc.field), exc.message)
    return render(request, "annotation/create.html",
                  _context(request, project, form=form,
                           label_editor={"labels": form.labels_by_version(), "hotkeys": LABEL_KEYS}),
                  status=400 if form.errors else 200)


@login_required
def campaign_detail(request: HttpRequest, project_id: int, campaign_id: int) -> HttpResponse:
    """Managers and reviewers: progress, agreement and quality with charts, exports. Annotators:
    the guidelines, their progress and the way in."""
    campaign = _visible_campaign(request, project_id, campaign_id)
    perms = policy.project_permissions(request.user, campaign.project)
    can_review = bool(perms & {"campaign.manage", "annotation.review"})
    return render(request, "annotation/detail.html", _context(
        request, campaign.project, campaign=campaign, progress=services.progress(campaign, request.user),
        guidelines_html=render_markdown(campaign.guidelines), can_review=can_review,
        can_annotate="annotation.submit" in perms and services.is_assigned(request.user, campaign),
        quality=quality.campaign_quality(campaign) if can_review else None,
        exports=campaign.exports.select_related("version", "dataset")[:20] if "campaign.manage" in perms else [],
        export_form=ExportForm() if "campaign.manage" in perms else None))


@login_required
@require_POST
def campaign_action(request: HttpRequest, project_id: int, campaign_id: int, action: str) -> HttpResponse:
    if action not in ("close", "export", "stop-suggestions"):
        raise NotFound()
    campaign = _campaign(request, project_id, campaign_id, "campaign.manage")
    try:
        if action == "close":
            services.campaign_close(user=request.user, campaign=campaign, ip_address=client_ip(request))
            messages.success(request, "Campaign closed: no more items are handed out.")
        elif action == "stop-suggestions":
            services.suggestions_stop(user=request.user, campaign=campaign, ip_address=client_ip(request))
            messages.success(request, "Model suggestions stopped: items suggested so far keep theirs.")
        else:
            form = ExportForm(request.POST)
            if not form.is_valid():
                messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
            else:
                data = form.cleaned_data
                services.export_start(user=request.user, campaign=campaign, kind=data["kind"], mode=data["mode"],
                                      min_agreement=data["min_agreement"], new_dataset_name=data["new_dataset_name"],
                                      ip_address=client_ip(request))
                messages.success(request, "Export queued: the new version appears below when it is written.")
    except (Invalid, Conflict) as exc:
        messages.error(request, exc.message)
    return redirect("annotation:detail", project_id=project_id, campaign_id=campaign.pk)


@login_required
def annotate(request: HttpRequest, project_id: int, campaign_id: int) -> HttpResponse:
    campaign = _campaign(request, project_id, campaign_id, "annotation.submit")
    return _annotate_page(request, campaign, campaign.schema.fields)


def _annotate_page(request: HttpRequest, campaign: Campaign, fields: list[dict], correcting: dict | None = None
                   ) -> HttpResponse:
    """The annotation page over `fields`, with the renderer of each of their types."""
    return render(request, "annotation/annotate.html", _context(
        request, campaign.project, campaign=campaign, guidelines_html=render_markdown(campaign.guidelines),
        fields=fields, correcting=correcting,
        field_scripts=[f"js/annotation/fields/{kind}.js" for kind in sorted({field["type"] for field in fields})]))


@login_required
@require_http_methods(["GET", "POST"])
def review(request: HttpRequest, project_id: int, campaign_id: int) -> HttpResponse:
    """Every annotation of each example; accept, reject with a comment, or settle it by adopting
    one annotator's answer. `?disagreements=1` shows only the examples annotators disagree on."""
    campaign = _campaign(request, project_id, campaign_id, "annotation.review")
    if request.method == "POST":
        _review_action(request, campaign)
        return redirect(request.get_full_path())
    only_disagreements = request.GET.get("disagreements") == "1"
    items = selectors.reviewable_items(campaign, disagreements=only_disagreements)
    return render(request, "annotation/review.html", _context(
        request, campaign.project, campaign=campaign, only_disagreements=only_disagreements,
        items=[selectors.review_payload(item) for item in items[:50]]))


@login_required
def correct(request: HttpRequest, project_id: int, campaign_id: int, annotation_id: int) -> HttpResponse:
    """A reviewer corrects one annotator's answer in the annotator's own form (spans, diffs,
    keys); the correction is kept beside the original (`reviewed_values`) and exports use it."""
    campaign = _campaign(request, project_id, campaign_id, "annotation.review")
    annotation = (Annotation.objects.select_related("item__row", "schema", "annotator")
                  .filter(pk=annotation_id, item__campaign=campaign, skipped=False).first())
    if annotation is None:
        raise NotFound()
    item = annotation.item
    fields = annotation.schema.fields  # the form version it was answered in, which validates the correction
    correcting = {
        "item": {"id": item.pk, "position": item.position, "example": selectors.example_payload(item, fields),
                 "suggestion": None, "draft": None},
        "annotation": {"id": annotation.pk, "annotator": annotation.annotator.username,
                       "values": annotation.reviewed_values or annotation.values, "comment": annotation.review_comment},
        "back": reverse("annotation:review", args=[project_id, campaign.pk]),
    }
    return _annotate_page(request, campaign, fields, correcting)


def _review_action(request: HttpRequest, campaign: Campaign) -> None:
    action = request.POST.get("action")
    try:
        annotation = Annotation.objects.select_related("item__campaign__schema", "item__row", "schema").get(
            pk=int(request.POST.get("annotation", "")), item__campaign=campaign)
    except (Annotation.DoesNotExist, ValueError):
        messages.error(request, "That annotation is not part of this campaign.")
        return
    try:
        if action in ("accept", "reject"):
            services.review(user=request.user, annotation=annotation, decision=action,
                            comment=request.POST.get("comment", ""))
            messages.success(request, f"Annotation by {annotation.annotator.username} {action}ed.")
        elif action == "gold":
            services.set_gold(user=request.user, item=annotation.item, values=annotation.values)
            messages.success(request, f"Example {annotation.item.position + 1} is gold: annotators are scored on it.")
        elif action == "adopt":
            services.adjudicate(user=request.user, item=annotation.item, values=annotation.values)
            messages.success(request, f"Example {annotation.item.position + 1} settled with "
                                      f"{annotation.annotator.username}'s answer.")
        else:
            messages.error(request, "Unknown review action.")
    except (Invalid, Conflict) as exc:
        messages.error(request, exc.message)
