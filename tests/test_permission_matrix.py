"""The permission matrix: every project-scoped API endpoint against every kind of principal.

EVERY NEW PROJECT-SCOPED API ENDPOINT MUST ADD A ROW TO `ENDPOINTS` BELOW. A row says the
method, the URL (Django route syntax, the same as in the URL conf), the permission the endpoint
needs (and, when the code checks more than one, all of them in the order it checks them), a
factory for the request body, the status of a successful call, and how to set up the objects
the call acts on so that success is actually possible.
`test_every_project_scoped_endpoint_in_the_url_conf_has_a_row` fails when a route or method
under /api/ that takes a `project_id`, a `dataset_id`, a `job_id` or a `comparison_id` has no row.

The expected answer for each (row, principal) cell is computed from the permission catalogue
(`apps/projects/permissions.py`), never written per cell:
- anonymous: 401 or 403; an expired or revoked token: 401;
- someone who cannot see the project (outsider, object-grant holder on project endpoints, a
  token without `project.view`): 404, and the body does not leak the project's name;
- someone who can see it but lacks a needed permission: 403 naming the first missing one;
- otherwise the row's success status, and a write leaves exactly one audit event.
A refused request writes no audit event.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.urls import URLResolver, get_resolver, resolve
from django.utils import timezone
from guardian.shortcuts import assign_perm

from apps.accounts import services as account_services
from apps.datasets.models import Dataset, DatasetRow, DatasetVersion
from apps.projects import services
from apps.projects.models import AuditEvent, Membership, Role
from apps.projects.permissions import BUILTIN_ROLES, PERMISSIONS, implied_by, with_implied
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

PROJECT_NAME = "Alpha"


# --- the objects one test acts on -------------------------------------------------------------

class World:
    """Fresh per test: project Alpha with its owner and one dataset, plus what a row arranges."""

    def __init__(self):
        self.project = ProjectFactory(name=PROJECT_NAME)
        self.owner = UserFactory(username="olivia")
        MembershipFactory(project=self.project, user=self.owner, role="owner")
        self.dataset = Dataset.objects.create(project=self.project, name="Reviews", created_by=self.owner)

    def custom_role(self, name: str, permissions) -> Role:
        return Role.objects.create(project=self.project, name=name,
                                   permissions=sorted(set(permissions) | {"project.view"}), created_by=self.owner)

    def member(self, username: str, *, role: str = "", custom_role: Role | None = None) -> Membership:
        return MembershipFactory(project=self.project, user=UserFactory(username=username), role=role,
                                 custom_role=custom_role)


# Targets of member writes hold a custom role with only project.view, so that whoever holds
# member.manage also holds everything the target's role grants (nobody grants what they lack).
def _arrange_new_member(world: World) -> dict:
    world.custom_role("Guest", ["project.view"])
    UserFactory(username="newbie")
    return {}


def _arrange_member_to_change(world: World) -> dict:
    guest = world.custom_role("Guest", ["project.view"])
    world.custom_role("Guest 2", ["project.view"])
    return {"membership_id": world.member("target", custom_role=guest).pk}


def _arrange_member_to_remove(world: World) -> dict:
    guest = world.custom_role("Guest", ["project.view"])
    return {"membership_id": world.member("target", custom_role=guest).pk}


def _arrange_unused_role(world: World) -> dict:
    return {"role_id": world.custom_role("Unused", ["project.view", "dataset.view"]).pk}


def _arrange_grantee(world: World) -> dict:
    UserFactory(username="grantee")
    return {}


def _arrange_grant_to_revoke(world: World) -> dict:
    grant = assign_perm("dataset_view", UserFactory(username="grantee"), world.dataset)
    return {"grant_id": grant.pk}


def _nothing(world: World) -> dict:
    return {}


def _arrange_version(world: World) -> dict:
    version = DatasetVersion.objects.create(dataset=world.dataset, number=1, status="ready", row_count=1,
                                            content_hash="0" * 64, author=world.owner)
    DatasetRow.objects.create(version=version, position=0, row_hash="0" * 64, prompt="hello", metadata={})
    return {"number": 1}


def _arrange_export_job(world: World) -> dict:
    """A finished export of the version, its file on disk."""
    import tempfile

    from apps.datasets.models import ExportJob

    _arrange_version(world)
    with tempfile.NamedTemporaryFile("wb", suffix=".parquet", delete=False) as handle:
        handle.write(b"PAR1")
    job = ExportJob.objects.create(version=world.dataset.versions.get(), format="parquet", state="succeeded",
                                   path=handle.name, size_bytes=4)
    return {"number": 1, "export_id": job.pk}


def _arrange_derive_job(world: World) -> dict:
    from apps.datasets.models import DeriveJob

    _arrange_version(world)
    return {"job_id": DeriveJob.objects.create(parent=world.dataset.versions.get(), kind="pii_scan").pk}


def _arrange_adapter(world: World) -> dict:
    """A ready base model and a ready adapter of it in world.project, the adapter's files on disk."""
    import tempfile
    from pathlib import Path

    from apps.registry.models import RegisteredModel
    from workers.models import ModelInfo

    info = ModelInfo(format="hf_dir", path="/placeholder", architecture="LlamaForCausalLM", model_type="llama",
                     parameters=1000, hidden_size=8, layers=1, heads=2, kv_heads=2, head_dim=4, intermediate_size=16,
                     vocab_size=32, context_length=64).as_dict()
    base = RegisteredModel.objects.create(project=world.project, name="Base", format="hf_dir", source_path="/x",
                                          weights_path="/x", status="ready", info=info, created_by=world.owner)
    directory = Path(tempfile.mkdtemp())
    (directory / "adapter_config.json").write_text("{}")
    adapter = RegisteredModel.objects.create(project=world.project, name="Tuned", format="hf_dir", kind="adapter",
                                             base_model=base, source_path=str(directory),
                                             weights_path=str(directory), status="ready", info=info,
                                             created_by=world.owner)
    return {"model_id": adapter.pk}


def _arrange_classifier(world: World) -> dict:
    """A ready adapter trained as a classifier (its lineage says so), and one classification by it."""
    from apps.registry.models import RegisteredModel
    from apps.serving.models import Classification

    values = _arrange_adapter(world)
    RegisteredModel.objects.filter(pk=values["model_id"]).update(
        lineage={"config": {"method": "classify", "class_labels": ["a", "b"]}})
    job = Classification.objects.create(project=world.project, model_id=values["model_id"], user=world.owner,
                                        texts=["x"], state="succeeded",
                                        results=[{"label": "a", "probabilities": {"a": 0.9, "b": 0.1}}])
    return {**values, "classification_id": job.pk}


def _arrange_model_export(world: World) -> dict:
    """A finished GGUF export of the adapter, its file on disk."""
    import tempfile

    from apps.registry.models import ModelExport

    values = _arrange_adapter(world)
    with tempfile.NamedTemporaryFile("wb", suffix=".gguf", delete=False) as handle:
        handle.write(b"GGUF")
    job = ModelExport.objects.create(model_id=values["model_id"], format="gguf-f16", state="succeeded",
                                     path=handle.name, size_bytes=4)
    return {"export_id": job.pk}


def _arrange_precision_measurement(world: World) -> dict:
    """A queued precision measurement of the adapter (no worker takes it here)."""
    from apps.registry.models import PrecisionMeasurement

    values = _arrange_adapter(world)
    return {"job_id": PrecisionMeasurement.objects.create(model_id=values["model_id"]).pk}


def _placeholder_info() -> dict:
    from workers.models import ModelInfo

    return ModelInfo(format="hf_dir", path="/placeholder", architecture="LlamaForCausalLM", model_type="llama",
                     parameters=1000, hidden_size=8, layers=1, heads=2, kv_heads=2, head_dim=4, intermediate_size=16,
                     vocab_size=32, context_length=64).as_dict()


def _arrange_catalogue(world: World) -> dict:
    """A ready catalogue model, not enabled in world.project."""
    from apps.registry.models import CatalogueModel

    entry = CatalogueModel.objects.create(name="Catalogued", format="hf_dir", source_path="/c", weights_path="/c",
                                          status="ready", info=_placeholder_info())
    world.entry_id = entry.pk
    return {"entry_id": entry.pk}


def _arrange_enabled_catalogue(world: World) -> dict:
    from apps.registry.models import CatalogueModel
    from apps.registry.services import enable_defaults_for_new_project

    values = _arrange_catalogue(world)
    CatalogueModel.objects.filter(pk=values["entry_id"]).update(default_enabled=True)
    enable_defaults_for_new_project(world.project)
    return values


def _arrange_catalogue_adapter(world: World) -> dict:
    """A catalogue base enabled in world.project and a ready adapter of it there."""
    from apps.registry.models import RegisteredModel

    _arrange_enabled_catalogue(world)
    base = world.project.models.get(catalogue_id=world.entry_id)
    adapter = RegisteredModel.objects.create(project=world.project, name="Tuned", format="peft", kind="adapter",
                                             base_model=base, source_path="/a", weights_path="/a", status="ready",
                                             info=base.info, created_by=world.owner)
    world.base_id, world.adapter_id = base.pk, adapter.pk
    return {"model_id": adapter.pk}


def _arrange_shared_adapter(world: World) -> dict:
    """The adapter shared with another project (Zulu), whose row of it exists."""
    from apps.registry.models import RegisteredModel

    values = _arrange_catalogue_adapter(world)
    zulu = ProjectFactory(name="Zulu")
    adapter = RegisteredModel.objects.get(pk=world.adapter_id)
    RegisteredModel.objects.create(project=zulu, name="Tuned", format="peft", kind="adapter", shared_from=adapter,
                                   source_path="/a", weights_path="/a", status="ready", info=adapter.info)
    return {**values, "target_id": zulu.pk}


def _arrange_alias(protected: bool):
    """The catalogue base with its adapter; `staging` of the base points at the base itself."""
    def arrange(world: World) -> dict:
        from apps.registry.models import ModelAlias

        _arrange_catalogue_adapter(world)
        ModelAlias.objects.create(project=world.project, model_id=world.base_id, version_id=world.base_id,
                                  name="staging", protected=protected)
        return {"model_id": world.base_id, "alias": "staging"}
    return arrange


def _arrange_alias_canary(world: World) -> dict:
    """`staging` of the base with its adapter as a 10% canary."""
    from apps.registry.models import ModelAlias

    values = _arrange_alias(False)(world)
    ModelAlias.objects.filter(model_id=world.base_id, name="staging").update(
        canary_version_id=world.adapter_id, canary_weight=10)
    return values


def _arrange_alias_captures(world: World) -> dict:
    """`staging` of the base logging its traffic, with one capture."""
    from apps.registry.models import ModelAlias
    from apps.serving.models import Capture

    values = _arrange_alias(False)(world)
    alias = ModelAlias.objects.get(model_id=world.base_id, name="staging")
    ModelAlias.objects.filter(pk=alias.pk).update(capture_enabled=True)
    Capture.objects.create(project=world.project, alias=alias, version_id=world.base_id, completion_id="chatcmpl-1",
                           messages=[{"role": "user", "content": "hi"}], response="hello")
    return values


def _arrange_sweep(world: World) -> dict:
    """A sweep of world.project with one queued job (on a placeholder model)."""
    from apps.training.models import Sweep
    from tests.training.fixtures import make_job

    job = make_job(world.project, world.owner, state="queued")
    sweep = Sweep.objects.create(project=world.project, name="Sweep", strategy="grid", space={"lora_r": [4]},
                                 max_jobs=1, base_model=job.base_model, dataset_version=job.dataset_version,
                                 created_by=world.owner)
    job.sweep = sweep
    job.save(update_fields=["sweep"])
    return {"sweep_id": sweep.pk}


def _arrange_job(state: str):
    """A job of world.project (on a placeholder model and a prompt/response version) in `state`."""
    def arrange(world: World) -> dict:
        from tests.training.fixtures import make_job

        return {"job_id": make_job(world.project, world.owner, state=state).pk}
    return arrange


def _arrange_comparison(state: str = "succeeded", *, decisive_vote: bool = False):
    """A comparison of world.project with its grid filled (placeholder models, no worker)."""
    def arrange(world: World) -> dict:
        from apps.comparison import services as comparison_services
        from tests.comparison.factories import make_comparison

        comparison = make_comparison(world.project, world.owner, state=state)
        if decisive_vote:
            pair = comparison_services.pair_next(user=world.owner, comparison=comparison)
            comparison_services.vote_cast(user=world.owner, comparison=comparison, pair_id=pair.pk, choice="a",
                                          client_id="arranged")
        return {"comparison_id": comparison.pk}
    return arrange


def _vote_body(world: World) -> dict:
    """A pair served to whoever makes the request: the person logged in last, else (API tokens)
    the owner, whose tokens they are."""
    from django.contrib.auth import get_user_model

    from apps.comparison.models import Comparison, Pair

    actor = (get_user_model().objects.filter(last_login__isnull=False).order_by("-last_login").first()
             or world.owner)
    comparison = Comparison.objects.get(project=world.project)
    first, second = comparison.contestants.order_by("position")[:2]
    pair = Pair.objects.create(comparison=comparison, voter=actor, prompt=comparison.prompts.first(), first=first,
                               second=second, first_on_left=True)
    return {"pair": pair.pk, "choice": "b", "client_id": "matrix"}


def _arrange_campaign(world: World) -> dict:
    """A campaign (all project annotators, overlap 2) over a one-row version, with its item."""
    from apps.annotation.models import Campaign, Item, LabelSchema

    _arrange_version(world)
    schema = LabelSchema.objects.create(project=world.project, name="S", created_by=world.owner,
                                        fields=ANNOTATION_FIELDS)
    campaign = Campaign.objects.create(project=world.project, name="C", dataset_version=world.dataset.versions.get(),
                                       schema=schema, overlap=2, item_count=1, created_by=world.owner)
    item = Item.objects.create(campaign=campaign, row=DatasetRow.objects.get(), position=0)
    return {"campaign_id": campaign.pk, "item_id": item.pk, "schema_id": schema.pk}


def _arrange_suggesting_campaign(world: World) -> dict:
    """The campaign, its model suggestions queued (what a stop acts on)."""
    from apps.annotation.models import SuggestionRun

    values = _arrange_campaign(world)
    SuggestionRun.objects.create(campaign_id=values["campaign_id"])
    return values


def _arrange_annotation(world: World) -> dict:
    """An annotator's answer on the campaign's item (someone else's, to whoever asks)."""
    import uuid

    from apps.annotation.models import Annotation, Campaign, Item

    values = _arrange_campaign(world)
    item = Item.objects.get(pk=values["item_id"])
    annotation = Annotation.objects.create(item=item, annotator=world.member("annie", role="annotator").user,
                                           schema=Campaign.objects.get().schema, client_id=uuid.uuid4(),
                                           values={"verdict": "good"})
    return {**values, "annotation_id": annotation.pk}


def _arrange_annotation_export(world: World) -> dict:
    from apps.annotation.models import AnnotationExport, Campaign

    values = _arrange_campaign(world)
    return {**values, "export_id": AnnotationExport.objects.create(campaign=Campaign.objects.get(), state="failed").pk}


ANNOTATION_FIELDS = [{"name": "verdict", "type": "single_label", "required": True, "description": "",
                      "labels": [{"value": "good", "hotkey": "1", "description": ""},
                                 {"value": "bad", "hotkey": "2", "description": ""}]}]


def _arrange_provider(world: World) -> dict:
    """A provider (nothing listens at its address: no row reaches it) with one model, enabled for world.project."""
    from apps.providers.models import Provider, ProviderEnablement, ProviderModel

    provider = Provider.objects.create(name="Outside", base_url="https://93.184.216.34/v1", max_retries=0)
    ProviderModel.objects.create(provider=provider, name="gpt-test")
    ProviderEnablement.objects.create(provider=provider, project=world.project)
    return {}


def _arrange_judge(run_state: str | None = None, kind: str = "pairwise"):
    """A finished comparison of world.project (placeholder models) and a judge on one of them;
    with `run_state`, a run of it in that state (no worker: nothing runs it)."""
    def arrange(world: World) -> dict:
        from apps.evaluation.models import Judge, JudgeRun
        from tests.comparison.factories import make_comparison

        comparison = make_comparison(world.project, world.owner)
        judge = Judge.objects.create(project=world.project, name="Judge", created_by=world.owner,
                                     local_model=comparison.contestants.first().model,
                                     rubric={"kind": kind, "instructions": "",
                                             "criteria": [{"name": "helpfulness", "description": "", "scale": "1-5"}]})
        kwargs = {"judge_id": judge.pk, "comparison_id": comparison.pk}
        if run_state:
            kwargs["run_id"] = JudgeRun.objects.create(project=world.project, judge=judge, comparison=comparison,
                                                       state=run_state, created_by=world.owner).pk
        return kwargs
    return arrange


def _arrange_judge_version(kind: str = "pointwise"):
    """A judge of `kind` (on a placeholder model) and a ready version of world.dataset with a
    prompt and two responses to judge, the second in the metadata key "second"
    (tests/evaluation/test_judge_dataset_runs.py runs it for real)."""
    def arrange(world: World) -> dict:
        from apps.datasets.models import DatasetRow, DatasetVersion
        from apps.evaluation.models import Judge
        from tests.comparison.factories import placeholder_model

        version = DatasetVersion.objects.create(dataset=world.dataset, number=1, status="ready", row_count=1,
                                                schema={"roles": {"prompt": "prompt", "response": "response"},
                                                        "metadata_keys": ["second"]})
        DatasetRow.objects.create(version=version, position=0, row_hash="0" * 64, prompt="2+2?", response="4",
                                  metadata={"second": "5"})
        criterion = {"name": "correct", "description": "", "scale": "pass_fail"}
        judge = Judge.objects.create(project=world.project, name="Judge", created_by=world.owner,
                                     local_model=placeholder_model(world.project),
                                     rubric={"kind": kind, "instructions": "", "criteria": [criterion]})
        return {"judge_id": judge.pk, "version_id": version.pk}
    return arrange


def _row_preference_body(world: World) -> dict:
    return {"position": 0, "choice": "a", "second_response_column": "second"}


def _row_rating_body(world: World) -> dict:
    return {"position": 0, "answer": {"correct": {"score": "pass", "reason": "matrix"}}}


def _judge_version_body(world: World) -> dict:
    from apps.datasets.models import DatasetVersion

    return {"version": DatasetVersion.objects.get(dataset=world.dataset).pk, "prompt_column": "prompt",
            "response_column": "response"}


def _rating_body(world: World) -> dict:
    from apps.comparison.models import Output

    return {"output": Output.objects.filter(comparison__project=world.project).first().pk,
            "answer": {"helpfulness": {"score": 4, "reason": "matrix"}}}


def _judge_body(world: World) -> dict:
    from apps.registry.models import RegisteredModel

    return {"name": "New judge", "rubric": {"kind": "pointwise", "criteria": [{"name": "correct"}]},
            "local_model": RegisteredModel.objects.filter(project=world.project).first().pk}


def _arrange_eval_suite(run_state: str | None = None):
    """A suite of world.project on a version of its dataset, and a placeholder model to run it on;
    with `run_state`, a run of it in that state (no worker: nothing runs it)."""
    def arrange(world: World) -> dict:
        from apps.datasets.models import DatasetRow, DatasetVersion
        from apps.evaluation.models import EvalRun, EvalSuite
        from tests.comparison.factories import placeholder_model

        version = DatasetVersion.objects.create(dataset=world.dataset, number=1, status="ready", author=world.owner,
                                                row_count=1, content_hash="e" * 64)
        DatasetRow.objects.create(version=version, position=0, row_hash="0" * 64, prompt="2+2?", response="4",
                                  metadata={})
        suite = EvalSuite.objects.create(project=world.project, name="Suite", dataset_version=version,
                                         metrics=[{"metric": "exact_match", "threshold": None}],
                                         created_by=world.owner)
        placeholder_model(world.project, "Candidate")
        kwargs = {"suite_id": suite.pk}
        if run_state:
            kwargs["run_id"] = EvalRun.objects.create(project=world.project, suite=suite, state=run_state,
                                                      model=suite.project.models.get(name="Candidate"),
                                                      created_by=world.owner).pk
        return kwargs
    return arrange


def _candidate_body(world: World) -> dict:
    from apps.registry.models import RegisteredModel

    return {"model": RegisteredModel.objects.get(project=world.project, name="Candidate").pk}


def _arrange_teacher(run_state: str | None = None):
    """A ready version of world.dataset with a prompt and a ready (placeholder) model of world.project
    to teach with; with `run_state`, a teacher run over it in that state (no worker: nothing runs it)."""
    def arrange(world: World) -> dict:
        from apps.datasets.models import DatasetRow, DatasetVersion
        from apps.evaluation.models import TeacherRun
        from tests.comparison.factories import placeholder_model

        version = DatasetVersion.objects.create(dataset=world.dataset, number=1, status="ready", row_count=1,
                                                schema={"roles": {"prompt": "prompt"}, "metadata_keys": []})
        DatasetRow.objects.create(version=version, position=0, row_hash="0" * 64, prompt="What is Paris?")
        placeholder_model(world.project)
        if not run_state:
            return {}
        return {"run_id": TeacherRun.objects.create(project=world.project, source_version=version, state=run_state,
                                                    created_by=world.owner).pk}
    return arrange


def _teacher_body(world: World) -> dict:
    from apps.datasets.models import DatasetVersion
    from apps.registry.models import RegisteredModel

    return {"version": DatasetVersion.objects.get(dataset=world.dataset).pk, "max_tokens": 16,
            "local_model": RegisteredModel.objects.filter(project=world.project).first().pk}


def _comparison_body(world: World) -> dict:
    from apps.comparison.models import Comparison

    return {"comparison": Comparison.objects.get(project=world.project).pk}


def _answer(world: World) -> dict:
    import uuid

    return {"client_id": str(uuid.uuid4()), "values": {"verdict": "good"}}


def _upload(world: World) -> dict:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return {"file": SimpleUploadedFile("rows.jsonl", b'{"prompt": "hello"}\n')}


def _no_body(world: World) -> None:
    return None


@dataclass(frozen=True)
class Endpoint:
    id: str
    method: str
    url: str  # Django route syntax; <int:project_id> and <int:dataset_id> are world.project / world.dataset
    permission: str  # the permission the endpoint is about
    body: Callable[[World], dict | None]
    success: int
    checks: tuple[str, ...] = ()  # every permission needed, in the order the code checks them
    arrange: Callable[[World], dict] = _nothing  # creates the targets; returns the other URL kwargs
    scope: str = "project"  # "dataset": the URL names a dataset, which an object grant can reach
    refused_to_tokens: str | None = None  # permission reported missing to any API token
    multipart: bool = False  # send the body as a multipart form (file uploads)
    audit_writes: int | None = None  # audit events a success writes; default: 1 for writes, 0 for reads
    # Refused members get this status: 404 where not holding the permission means not being "in"
    # the object at all (an annotation campaign one is not assigned to).
    refusal: int = 403
    any_of: tuple[str, ...] = ()  # success needs one of these (on top of `needs`)

    @property
    def expected_audit_writes(self) -> int:
        return self.audit_writes if self.audit_writes is not None else (0 if self.method == "GET" else 1)

    @property
    def needs(self) -> tuple[str, ...]:
        return self.checks or (self.permission,)


P = "/api/projects/<int:project_id>"

ENDPOINTS = [
    # members
    Endpoint("members-list", "GET", f"{P}/members/", "project.view", _no_body, 200),
    Endpoint("member-add", "POST", f"{P}/members/", "member.manage",
             lambda w: {"username": "newbie", "role": "Guest"}, 201, arrange=_arrange_new_member),
    Endpoint("member-change-role", "PATCH", f"{P}/members/<int:membership_id>/", "member.manage",
             lambda w: {"role": "Guest 2"}, 200, arrange=_arrange_member_to_change),
    Endpoint("member-remove", "DELETE", f"{P}/members/<int:membership_id>/", "member.manage",
             _no_body, 204, arrange=_arrange_member_to_remove),
    # custom roles
    Endpoint("roles-list", "GET", f"{P}/roles/", "project.view", _no_body, 200),
    Endpoint("role-create", "POST", f"{P}/roles/", "role.manage",
             lambda w: {"name": "Curators", "permissions": ["project.view"]}, 201),
    Endpoint("role-update", "PATCH", f"{P}/roles/<int:role_id>/", "role.manage",
             lambda w: {"name": "Renamed", "description": "Now with a description"}, 200,
             arrange=_arrange_unused_role),
    Endpoint("role-delete", "DELETE", f"{P}/roles/<int:role_id>/", "role.manage", _no_body, 204,
             arrange=_arrange_unused_role),
    # object grants: managing them needs member.manage, and nobody grants what they lack
    Endpoint("grants-list", "GET", f"{P}/grants/", "member.manage", _no_body, 200),
    Endpoint("grant-create", "POST", f"{P}/grants/", "member.manage",
             lambda w: {"username": "grantee", "object_type": "dataset", "object_id": w.dataset.pk,
                        "permission": "dataset.view"}, 201,
             checks=("member.manage", "dataset.view"), arrange=_arrange_grantee),
    Endpoint("grant-revoke", "DELETE", f"{P}/grants/<int:grant_id>/", "member.manage", _no_body, 204,
             checks=("member.manage", "dataset.view"), arrange=_arrange_grant_to_revoke),
    # audit log
    Endpoint("audit-list", "GET", f"{P}/audit/", "audit.view", _no_body, 200),
    Endpoint("audit-export-csv", "GET", f"{P}/audit/export.csv", "audit.view", _no_body, 200),
    Endpoint("audit-export-jsonl", "GET", f"{P}/audit/export.jsonl", "audit.view", _no_body, 200),
    # the project itself
    Endpoint("project-get", "GET", f"{P}/", "project.view", _no_body, 200),
    Endpoint("project-update", "PATCH", f"{P}/", "project.edit", lambda w: {"description": "Edited"}, 200),
    Endpoint("project-delete", "DELETE", f"{P}/", "project.delete",
             lambda w: {"confirm_name": w.project.name}, 204),
    Endpoint("project-archive", "POST", f"{P}/archive/", "project.archive", lambda w: {"archived": True}, 200),
    # datasets
    Endpoint("datasets-list", "GET", f"{P}/datasets/", "dataset.view", _no_body, 200),
    Endpoint("dataset-create", "POST", f"{P}/datasets/", "dataset.import", lambda w: {"name": "Fresh"}, 201),
    Endpoint("dataset-import-upload", "POST", f"{P}/datasets/<int:dataset_id>/imports/", "dataset.import", _upload,
             201, checks=("dataset.view", "dataset.import"), scope="dataset", multipart=True),
    Endpoint("dataset-versions", "GET", "/api/datasets/<int:dataset_id>/versions/", "dataset.view", _no_body, 200,
             scope="dataset"),
    Endpoint("version-get", "GET", "/api/datasets/<int:dataset_id>/versions/<int:number>/", "dataset.view",
             _no_body, 200, scope="dataset", arrange=_arrange_version),
    Endpoint("version-purge", "DELETE", "/api/datasets/<int:dataset_id>/versions/<int:number>/", "dataset.delete",
             _no_body, 202, checks=("dataset.view", "dataset.delete"), scope="dataset", arrange=_arrange_version),
    Endpoint("version-rows", "GET", "/api/datasets/<int:dataset_id>/versions/<int:number>/rows/", "dataset.view",
             _no_body, 200, scope="dataset", arrange=_arrange_version),
    Endpoint("version-export", "GET", "/api/datasets/<int:dataset_id>/versions/<int:number>/export.jsonl",
             "dataset.export", _no_body, 200, scope="dataset", arrange=_arrange_version, audit_writes=1),
    Endpoint("version-split", "POST", "/api/datasets/<int:dataset_id>/versions/<int:number>/split/", "dataset.edit",
             lambda w: {"ratios": {"train": 0.5, "test": 0.5}, "seed": 7}, 202,
             checks=("dataset.view", "dataset.edit"), scope="dataset", arrange=_arrange_version),
    Endpoint("version-export-jobs", "GET", "/api/datasets/<int:dataset_id>/versions/<int:number>/exports/",
             "dataset.export", _no_body, 200, checks=("dataset.view", "dataset.export"), scope="dataset",
             arrange=_arrange_version),
    Endpoint("version-export-job-start", "POST", "/api/datasets/<int:dataset_id>/versions/<int:number>/exports/",
             "dataset.export", lambda w: {"format": "parquet"}, 202, checks=("dataset.view", "dataset.export"),
             scope="dataset", arrange=_arrange_version),
    Endpoint("dataset-export-get", "GET", "/api/dataset-exports/<int:export_id>/", "dataset.export", _no_body, 200,
             scope="dataset", arrange=_arrange_export_job),
    Endpoint("dataset-export-download", "GET", "/api/dataset-exports/<int:export_id>/download/", "dataset.export",
             _no_body, 200, scope="dataset", arrange=_arrange_export_job),
    Endpoint("version-edit", "POST", "/api/datasets/<int:dataset_id>/versions/<int:number>/edit/", "dataset.edit",
             lambda w: {"edits": {"0": {"response": "fixed"}}}, 202, checks=("dataset.view", "dataset.edit"),
             scope="dataset", arrange=_arrange_version),
    Endpoint("version-pii-scan", "POST", "/api/datasets/<int:dataset_id>/versions/<int:number>/pii-scan/",
             "dataset.edit", _no_body, 202, checks=("dataset.view", "dataset.edit"), scope="dataset",
             arrange=_arrange_version),
    Endpoint("version-redact", "POST", "/api/datasets/<int:dataset_id>/versions/<int:number>/redact/",
             "dataset.edit", _no_body, 202, checks=("dataset.view", "dataset.edit"), scope="dataset",
             arrange=_arrange_version),
    Endpoint("derive-job-get", "GET", "/api/derive-jobs/<int:job_id>/", "dataset.view", _no_body, 200,
             scope="dataset", arrange=_arrange_derive_job),
    Endpoint("models-list", "GET", f"{P}/models/", "model.view", _no_body, 200),
    # A permitted registration reaches the path check: this path does not exist, so it is 400
    # (tests/registry covers successful registration); the refusals are what this row checks.
    Endpoint("model-register", "POST", f"{P}/models/", "model.register",
             lambda w: {"name": "M", "path": "/nonexistent/model"}, 400, audit_writes=0),
    Endpoint("model-get", "GET", "/api/models/<int:model_id>/", "model.view", _no_body, 200, arrange=_arrange_adapter),
    Endpoint("model-delete", "DELETE", "/api/models/<int:model_id>/", "model.delete", _no_body, 204,
             checks=("model.view", "model.delete"), arrange=_arrange_adapter),
    # Weights leave the server with a download: a permission of its own, as a dataset export has.
    Endpoint("model-download", "GET", "/api/models/<int:model_id>/download/", "model.download", _no_body, 200,
             checks=("model.view", "model.download"), arrange=_arrange_adapter),
    Endpoint("model-merge", "POST", "/api/models/<int:model_id>/merge/", "model.register",
             lambda w: {"name": "Merged"}, 202, checks=("model.view", "model.register"), arrange=_arrange_adapter),
    # Exports for deployment carry the weights out, as a download does.
    Endpoint("model-exports", "GET", "/api/models/<int:model_id>/exports/", "model.download", _no_body, 200,
             checks=("model.view", "model.download"), arrange=_arrange_adapter),
    Endpoint("model-export-start", "POST", "/api/models/<int:model_id>/exports/", "model.download",
             lambda w: {"format": "gguf-q8_0"}, 202, checks=("model.view", "model.download"), arrange=_arrange_adapter),
    Endpoint("model-export-get", "GET", "/api/model-exports/<int:export_id>/", "model.download", _no_body, 200,
             checks=("model.view", "model.download"), arrange=_arrange_model_export),
    Endpoint("model-export-delete", "DELETE", "/api/model-exports/<int:export_id>/", "model.download", _no_body, 204,
             checks=("model.view", "model.download"), arrange=_arrange_model_export),
    Endpoint("model-export-download", "GET", "/api/model-exports/<int:export_id>/download/", "model.download",
             _no_body, 200, checks=("model.view", "model.download"), arrange=_arrange_model_export),
    # Serving precisions: set by those who may register models; measuring runs an inference worker.
    Endpoint("model-serving-precision", "PATCH", "/api/models/<int:model_id>/", "model.register",
             lambda w: {"serving_precision": "fp32"}, 200, checks=("model.view", "model.register"),
             arrange=_arrange_adapter),
    Endpoint("model-precision-measurements", "GET", "/api/models/<int:model_id>/precision-measurements/",
             "model.view", _no_body, 200, arrange=_arrange_adapter),
    Endpoint("model-precision-measure", "POST", "/api/models/<int:model_id>/precision-measurements/",
             "model.register", _no_body, 202, checks=("model.view", "model.register"), arrange=_arrange_adapter),
    Endpoint("precision-measurement-get", "GET", "/api/precision-measurements/<int:job_id>/", "model.view",
             _no_body, 200, arrange=_arrange_precision_measurement),
    Endpoint("precision-measurement-cancel", "POST", "/api/precision-measurements/<int:job_id>/cancel/",
             "model.register", _no_body, 200, checks=("model.view", "model.register"),
             arrange=_arrange_precision_measurement),
    # A classifier answers texts as a generation does: model.generate, no audit event per call.
    Endpoint("model-classify", "POST", "/api/models/<int:model_id>/classify/", "model.generate",
             lambda w: {"texts": ["x"]}, 202, checks=("model.view", "model.generate"), arrange=_arrange_classifier,
             audit_writes=0),
    Endpoint("classification-get", "GET", "/api/classifications/<int:classification_id>/", "model.generate",
             _no_body, 200, checks=("model.view", "model.generate"), arrange=_arrange_classifier),
    # the site's catalogue as a project sees it; adapters shared with other projects; aliases
    Endpoint("project-catalogue", "GET", f"{P}/catalogue/", "model.view", _no_body, 200, arrange=_arrange_catalogue),
    Endpoint("project-catalogue-enable", "POST", f"{P}/catalogue/", "model.enable",
             lambda w: {"catalogue_model": w.entry_id}, 201, arrange=_arrange_catalogue),
    Endpoint("project-catalogue-disable", "DELETE", f"{P}/catalogue/<int:entry_id>/", "model.enable", _no_body, 204,
             arrange=_arrange_enabled_catalogue),
    Endpoint("model-shares", "GET", "/api/models/<int:model_id>/shares/", "model.share", _no_body, 200,
             checks=("model.view", "model.share"), arrange=_arrange_shared_adapter),
    # A permitted share names this same project: refused (400, field project) once every check has passed.
    Endpoint("model-share", "POST", "/api/models/<int:model_id>/shares/", "model.share",
             lambda w: {"project": w.project.pk}, 400, checks=("model.view", "model.share", "model.register"),
             arrange=_arrange_catalogue_adapter, audit_writes=0),
    Endpoint("model-unshare", "DELETE", "/api/models/<int:model_id>/shares/<int:target_id>/", "model.share",
             _no_body, 204, checks=("model.view", "model.share"), arrange=_arrange_shared_adapter),
    Endpoint("model-aliases", "GET", "/api/models/<int:model_id>/aliases/", "model.view", _no_body, 200,
             arrange=_arrange_alias(False)),
    Endpoint("model-alias-move", "PUT", "/api/models/<int:model_id>/aliases/<str:alias>/", "model.alias",
             lambda w: {"version": w.adapter_id}, 200, checks=("model.view", "model.alias"),
             arrange=_arrange_alias(False)),
    Endpoint("model-alias-move-protected", "PUT", "/api/models/<int:model_id>/aliases/<str:alias>/", "model.promote",
             lambda w: {"version": w.adapter_id}, 200, checks=("model.view", "model.alias", "model.promote"),
             arrange=_arrange_alias(True)),
    Endpoint("model-alias-delete", "DELETE", "/api/models/<int:model_id>/aliases/<str:alias>/", "model.alias",
             _no_body, 204, checks=("model.view", "model.alias"), arrange=_arrange_alias(False)),
    Endpoint("model-serving-metrics", "GET", "/api/models/<int:model_id>/serving-metrics/", "model.view", _no_body,
             200, arrange=_arrange_alias(False)),
    Endpoint("alias-capture", "GET", "/api/models/<int:model_id>/aliases/<str:alias>/capture/", "model.view",
             _no_body, 200, arrange=_arrange_alias(False)),
    Endpoint("alias-capture-set", "PUT", "/api/models/<int:model_id>/aliases/<str:alias>/capture/", "model.alias",
             lambda w: {"enabled": True, "sample_rate": 0.5}, 200, checks=("model.view", "model.alias"),
             arrange=_arrange_alias(False)),
    Endpoint("alias-captures", "GET", "/api/models/<int:model_id>/aliases/<str:alias>/captures/", "dataset.view",
             _no_body, 200, checks=("model.view", "dataset.view"), arrange=_arrange_alias_captures),
    Endpoint("alias-captures-dataset", "POST", "/api/models/<int:model_id>/aliases/<str:alias>/captures/dataset/",
             "dataset.import", lambda w: {"dataset": w.dataset.pk}, 202,
             checks=("model.view", "dataset.view", "dataset.import"), arrange=_arrange_alias_captures, audit_writes=3),
    Endpoint("alias-canary", "GET", "/api/models/<int:model_id>/aliases/<str:alias>/canary/", "model.view",
             _no_body, 200, arrange=_arrange_alias(False)),
    Endpoint("alias-canary-start", "PUT", "/api/models/<int:model_id>/aliases/<str:alias>/canary/", "model.alias",
             lambda w: {"version": w.adapter_id, "weight": 10}, 200, checks=("model.view", "model.alias"),
             arrange=_arrange_alias(False)),
    Endpoint("alias-canary-stop", "DELETE", "/api/models/<int:model_id>/aliases/<str:alias>/canary/", "model.alias",
             _no_body, 200, checks=("model.view", "model.alias"), arrange=_arrange_alias_canary),
    Endpoint("model-memory-estimate", "GET", "/api/models/<int:model_id>/memory-estimate/", "model.view", _no_body,
             200, arrange=_arrange_adapter),
    Endpoint("dataset-get", "GET", "/api/datasets/<int:dataset_id>/", "dataset.view", _no_body, 200,
             scope="dataset"),
    Endpoint("dataset-delete", "DELETE", "/api/datasets/<int:dataset_id>/", "dataset.delete", _no_body, 204,
             checks=("dataset.view", "dataset.delete"), scope="dataset"),
    # fine-tune jobs. A permitted launch reaches the model check: model 999999 is not the
    # project's, so it is 400 (tests/training covers launches); the refusals are what these rows check.
    Endpoint("jobs-list", "GET", f"{P}/jobs/", "job.view", _no_body, 200),
    Endpoint("job-launch", "POST", f"{P}/jobs/", "job.launch",
             lambda w: {"name": "Run", "base_model": 999999, "dataset_version": 999999}, 400, audit_writes=0),
    Endpoint("job-estimate", "POST", f"{P}/jobs/estimate/", "job.launch",
             lambda w: {"name": "Run", "base_model": 999999, "dataset_version": 999999}, 400, audit_writes=0),
    Endpoint("job-get", "GET", "/api/jobs/<int:job_id>/", "job.view", _no_body, 200, arrange=_arrange_job("running")),
    Endpoint("job-metrics", "GET", "/api/jobs/<int:job_id>/metrics/", "job.view", _no_body, 200,
             arrange=_arrange_job("running")),
    Endpoint("job-cancel", "POST", "/api/jobs/<int:job_id>/cancel/", "job.cancel", _no_body, 200,
             checks=("job.view", "job.cancel"), arrange=_arrange_job("queued")),
    Endpoint("job-resume", "POST", "/api/jobs/<int:job_id>/resume/", "job.launch", _no_body, 200,
             checks=("job.view", "job.launch"), arrange=_arrange_job("failed")),
    Endpoint("job-copy", "POST", "/api/jobs/<int:job_id>/copy/", "job.launch", lambda w: {"name": "Again"}, 201,
             checks=("job.view", "job.launch", "model.view", "dataset.view"), arrange=_arrange_job("succeeded")),
    # sweeps. A permitted launch reaches the model check (400), as a job's launch does; tests/training/test_sweeps.py
    # covers launches.
    Endpoint("sweeps-list", "GET", f"{P}/sweeps/", "job.view", _no_body, 200),
    Endpoint("sweep-launch", "POST", f"{P}/sweeps/", "job.launch",
             lambda w: {"name": "Sweep", "base_model": 999999, "dataset_version": 999999, "strategy": "grid",
                        "space": {"lora_r": [4, 8]}, "max_jobs": 2}, 400, audit_writes=0),
    Endpoint("sweep-get", "GET", "/api/sweeps/<int:sweep_id>/", "job.view", _no_body, 200, arrange=_arrange_sweep),
    Endpoint("sweep-cancel", "POST", "/api/sweeps/<int:sweep_id>/cancel/", "job.cancel", _no_body, 200,
             checks=("job.view", "job.cancel"), arrange=_arrange_sweep),
    # comparisons. A permitted create reaches the model check: model 999999 is not the project's, so
    # it is 400 (tests/comparison covers creation); the refusals are what this row checks.
    Endpoint("comparisons-list", "GET", f"{P}/comparisons/", "compare.view", _no_body, 200),
    Endpoint("comparison-create", "POST", f"{P}/comparisons/", "compare.run",
             lambda w: {"name": "Cmp", "models": [999999, 999998], "prompts": ["hi"]}, 400, audit_writes=0),
    Endpoint("project-leaderboard", "GET", f"{P}/leaderboard/", "compare.view", _no_body, 200),
    Endpoint("comparison-get", "GET", "/api/comparisons/<int:comparison_id>/", "compare.view", _no_body, 200,
             arrange=_arrange_comparison()),
    Endpoint("comparison-delete", "DELETE", "/api/comparisons/<int:comparison_id>/", "compare.run", _no_body, 204,
             checks=("compare.view", "compare.run"), arrange=_arrange_comparison()),
    Endpoint("comparison-cancel", "POST", "/api/comparisons/<int:comparison_id>/cancel/", "compare.run", _no_body,
             200, checks=("compare.view", "compare.run"), arrange=_arrange_comparison("queued")),
    Endpoint("comparison-grid", "GET", "/api/comparisons/<int:comparison_id>/grid/", "compare.view", _no_body, 200,
             arrange=_arrange_comparison()),
    Endpoint("comparison-leaderboard", "GET", "/api/comparisons/<int:comparison_id>/leaderboard/", "compare.view",
             _no_body, 200, arrange=_arrange_comparison()),
    Endpoint("comparison-next-pair", "POST", "/api/comparisons/<int:comparison_id>/pairs/next/", "compare.vote",
             _no_body, 200, arrange=_arrange_comparison(), audit_writes=0),
    Endpoint("comparison-vote", "POST", "/api/comparisons/<int:comparison_id>/votes/", "compare.vote", _vote_body,
             201, arrange=_arrange_comparison()),
    Endpoint("comparison-export", "POST", "/api/comparisons/<int:comparison_id>/export/", "dataset.import",
             lambda w: {"dataset_name": "Preferences"}, 201, checks=("compare.view", "dataset.import"),
             arrange=_arrange_comparison(decisive_vote=True)),
    # annotation. Working a campaign needs annotation.submit and being assigned to it: anyone
    # else is not "in" it and gets 404 (the campaign here is open to all project annotators).
    Endpoint("label-schemas-list", "GET", f"{P}/label-schemas/", "campaign.manage", _no_body, 200),
    Endpoint("label-schema-create", "POST", f"{P}/label-schemas/", "campaign.manage",
             lambda w: {"name": "S", "fields": ANNOTATION_FIELDS}, 201),
    Endpoint("label-schema-update", "PATCH", "/api/label-schemas/<int:schema_id>/", "campaign.manage",
             lambda w: {"fields": ANNOTATION_FIELDS}, 200, arrange=_arrange_campaign),
    Endpoint("campaigns-list", "GET", f"{P}/campaigns/", "project.view", _no_body, 200),
    Endpoint("campaign-create", "POST", f"{P}/campaigns/", "campaign.manage",
             lambda w: {"name": "C2", "dataset_version": w.dataset.versions.get().pk,
                        "schema": w.project.label_schemas.get().pk}, 201, checks=("campaign.manage", "dataset.view"),
             arrange=_arrange_campaign),
    Endpoint("campaign-get", "GET", "/api/campaigns/<int:campaign_id>/", "annotation.submit", _no_body, 200,
             arrange=_arrange_campaign, refusal=404,
             any_of=("annotation.submit", "campaign.manage", "annotation.review")),
    Endpoint("campaign-close", "POST", "/api/campaigns/<int:campaign_id>/close/", "campaign.manage", _no_body, 200,
             arrange=_arrange_campaign),
    Endpoint("campaign-suggestions-stop", "POST", "/api/campaigns/<int:campaign_id>/suggestions/stop/",
             "campaign.manage", _no_body, 200, arrange=_arrange_suggesting_campaign),
    Endpoint("campaign-next", "POST", "/api/campaigns/<int:campaign_id>/next/", "annotation.submit", _no_body, 200,
             arrange=_arrange_campaign, refusal=404, audit_writes=0),
    Endpoint("campaign-mine", "GET", "/api/campaigns/<int:campaign_id>/mine/", "annotation.submit", _no_body, 200,
             arrange=_arrange_campaign, refusal=404),
    Endpoint("campaign-item", "GET", "/api/campaigns/<int:campaign_id>/items/<int:item_id>/", "annotation.submit",
             _no_body, 200, arrange=_arrange_campaign, refusal=404),
    Endpoint("campaign-submit", "POST", "/api/campaigns/<int:campaign_id>/items/<int:item_id>/submit/",
             "annotation.submit", _answer, 201, arrange=_arrange_campaign, refusal=404),
    Endpoint("campaign-skip", "POST", "/api/campaigns/<int:campaign_id>/items/<int:item_id>/skip/",
             "annotation.submit", _answer, 201, arrange=_arrange_campaign, refusal=404),
    Endpoint("campaign-draft", "PUT", "/api/campaigns/<int:campaign_id>/items/<int:item_id>/draft/",
             "annotation.submit", lambda w: {"values": {"verdict": "bad"}}, 200, arrange=_arrange_campaign,
             refusal=404, audit_writes=0),
    Endpoint("campaign-adjudicate", "POST", "/api/campaigns/<int:campaign_id>/items/<int:item_id>/adjudicate/",
             "annotation.review", lambda w: {"values": {"verdict": "bad"}}, 200, arrange=_arrange_annotation),
    Endpoint("campaign-gold", "PUT", "/api/campaigns/<int:campaign_id>/items/<int:item_id>/gold/",
             "campaign.manage", lambda w: {"values": {"verdict": "good"}}, 200, arrange=_arrange_campaign),
    Endpoint("campaign-review-queue", "GET", "/api/campaigns/<int:campaign_id>/review/", "annotation.review",
             _no_body, 200, arrange=_arrange_annotation),
    Endpoint("campaign-quality", "GET", "/api/campaigns/<int:campaign_id>/quality/", "annotation.review",
             _no_body, 200, arrange=_arrange_annotation),
    Endpoint("campaign-exports-list", "GET", "/api/campaigns/<int:campaign_id>/exports/", "campaign.manage",
             _no_body, 200, arrange=_arrange_campaign),
    Endpoint("campaign-export", "POST", "/api/campaigns/<int:campaign_id>/exports/", "campaign.manage",
             lambda w: {"mode": "majority"}, 202, checks=("campaign.manage", "dataset.import"),
             arrange=_arrange_annotation),
    Endpoint("campaign-annotations-raw", "GET", "/api/campaigns/<int:campaign_id>/annotations/", "campaign.manage",
             _no_body, 200, arrange=_arrange_annotation),
    Endpoint("annotation-export-get", "GET", "/api/annotation-exports/<int:export_id>/", "campaign.manage",
             _no_body, 200, arrange=_arrange_annotation_export),
    Endpoint("annotation-get", "GET", "/api/annotations/<int:annotation_id>/", "annotation.review", _no_body, 200,
             arrange=_arrange_annotation),
    Endpoint("annotation-review", "POST", "/api/annotations/<int:annotation_id>/review/", "annotation.review",
             lambda w: {"decision": "accept"}, 200, arrange=_arrange_annotation),
    # outside model providers enabled for the project. A permitted chat reaches the message check
    # (an empty list is a 400): tests/providers covers real calls; the refusals are what this row checks.
    Endpoint("provider-models-list", "GET", f"{P}/provider-models/", "model.view", _no_body, 200,
             arrange=_arrange_provider),
    Endpoint("provider-usage", "GET", f"{P}/provider-usage/", "model.view", _no_body, 200),
    Endpoint("provider-costs", "GET", f"{P}/provider-costs/", "model.view", _no_body, 200),
    Endpoint("provider-chat", "POST", f"{P}/provider-chat/", "provider.use",
             lambda w: {"provider_model": "Outside/gpt-test", "messages": []}, 400, arrange=_arrange_provider,
             audit_writes=0),
    Endpoint("provider-policy-get", "GET", f"{P}/provider-policy/", "model.view", _no_body, 200),
    Endpoint("provider-policy-update", "PATCH", f"{P}/provider-policy/", "project.edit",
             lambda w: {"redact_pii": True}, 200),
    # judges (apps/evaluation): tests/evaluation runs them for real; these rows check who may.
    Endpoint("judges-list", "GET", f"{P}/judges/", "compare.view", _no_body, 200),
    Endpoint("judge-create", "POST", f"{P}/judges/", "compare.run", _judge_body, 201, arrange=_arrange_judge()),
    Endpoint("judge-get", "GET", f"{P}/judges/<int:judge_id>/", "compare.view", _no_body, 200,
             arrange=_arrange_judge()),
    Endpoint("judge-delete", "DELETE", f"{P}/judges/<int:judge_id>/", "compare.run", _no_body, 204,
             checks=("compare.view", "compare.run"), arrange=_arrange_judge()),
    Endpoint("judge-estimate", "POST", f"{P}/judges/<int:judge_id>/estimate/", "compare.view", _comparison_body,
             200, arrange=_arrange_judge(), audit_writes=0),
    Endpoint("judge-launch", "POST", f"{P}/judges/<int:judge_id>/runs/", "compare.run", _comparison_body, 201,
             checks=("compare.view", "compare.run"), arrange=_arrange_judge()),
    # the same two over a dataset version's responses: reading the version takes dataset.view too
    Endpoint("judge-estimate-version", "POST", f"{P}/judges/<int:judge_id>/estimate/", "compare.view",
             _judge_version_body, 200, checks=("compare.view", "dataset.view"), arrange=_arrange_judge_version(),
             audit_writes=0),
    Endpoint("judge-launch-version", "POST", f"{P}/judges/<int:judge_id>/runs/", "compare.run", _judge_version_body,
             201, checks=("compare.view", "compare.run", "dataset.view"), arrange=_arrange_judge_version()),
    # people rate a pointwise judge's outputs blind, with the voters' permission
    Endpoint("judge-rating-next", "GET", f"{P}/judges/<int:judge_id>/comparisons/<int:comparison_id>/ratings/next/",
             "compare.vote", _no_body, 200, arrange=_arrange_judge(kind="pointwise")),
    Endpoint("judge-rating-submit", "POST", f"{P}/judges/<int:judge_id>/comparisons/<int:comparison_id>/ratings/",
             "compare.vote", _rating_body, 201, arrange=_arrange_judge(kind="pointwise")),
    # ... and a dataset version's responses, which takes dataset.view on it too
    Endpoint("judge-row-rating-next", "GET", f"{P}/judges/<int:judge_id>/versions/<int:version_id>/ratings/next/",
             "compare.vote", _no_body, 200, checks=("compare.vote", "dataset.view"),
             arrange=_arrange_judge_version()),
    Endpoint("judge-row-rating-submit", "POST", f"{P}/judges/<int:judge_id>/versions/<int:version_id>/ratings/",
             "compare.vote", _row_rating_body, 201, checks=("compare.vote", "dataset.view"),
             arrange=_arrange_judge_version()),
    # ... and choose between a version row's two responses for a pairwise judge, as they rate rows
    Endpoint("judge-row-preference-next", "GET",
             f"{P}/judges/<int:judge_id>/versions/<int:version_id>/preferences/next/?second_response_column=second",
             "compare.vote", _no_body, 200, checks=("compare.vote", "dataset.view"),
             arrange=_arrange_judge_version("pairwise")),
    Endpoint("judge-row-preference-submit", "POST", f"{P}/judges/<int:judge_id>/versions/<int:version_id>/preferences/",
             "compare.vote", _row_preference_body, 201, checks=("compare.vote", "dataset.view"),
             arrange=_arrange_judge_version("pairwise")),
    Endpoint("judge-runs-list", "GET", f"{P}/judge-runs/", "compare.view", _no_body, 200),
    Endpoint("judge-run-get", "GET", f"{P}/judge-runs/<int:run_id>/", "compare.view", _no_body, 200,
             arrange=_arrange_judge("succeeded")),
    Endpoint("judge-run-cancel", "POST", f"{P}/judge-runs/<int:run_id>/cancel/", "compare.run", _no_body, 200,
             checks=("compare.view", "compare.run"), arrange=_arrange_judge("queued")),
    # teacher runs (apps/evaluation): tests/evaluation/test_teacher_runs.py runs them for real.
    Endpoint("teacher-runs-list", "GET", f"{P}/teacher-runs/", "dataset.view", _no_body, 200),
    Endpoint("teacher-estimate", "POST", f"{P}/teacher-runs/estimate/", "dataset.view", _teacher_body, 200,
             checks=("dataset.view", "model.generate"), arrange=_arrange_teacher(), audit_writes=0),
    Endpoint("teacher-launch", "POST", f"{P}/teacher-runs/", "dataset.import", _teacher_body, 201,
             checks=("dataset.view", "dataset.import", "model.generate"), arrange=_arrange_teacher()),
    Endpoint("teacher-run-get", "GET", f"{P}/teacher-runs/<int:run_id>/", "dataset.view", _no_body, 200,
             arrange=_arrange_teacher("running")),
    Endpoint("teacher-run-cancel", "POST", f"{P}/teacher-runs/<int:run_id>/cancel/", "dataset.import", _no_body,
             200, checks=("dataset.view", "dataset.import"), arrange=_arrange_teacher("queued")),
    Endpoint("judge-calibration-get", "GET", f"{P}/judge-calibration/", "compare.view", _no_body, 200),
    Endpoint("judge-calibration-update", "PATCH", f"{P}/judge-calibration/", "project.edit",
             lambda w: {"min_kappa": 0.4}, 200),
    # eval suites (apps/evaluation): tests/evaluation runs and creates them for real; a suite with no metric is a
    # 400 after the permission check; these rows check who may.
    Endpoint("eval-suites-list", "GET", f"{P}/eval-suites/", "compare.view", _no_body, 200),
    Endpoint("eval-suite-create", "POST", f"{P}/eval-suites/", "compare.run",
             lambda w: {"name": "Suite", "dataset_version": 999999, "metrics": []}, 400, audit_writes=0),
    Endpoint("eval-suite-get", "GET", f"{P}/eval-suites/<int:suite_id>/", "compare.view", _no_body, 200,
             arrange=_arrange_eval_suite()),
    Endpoint("eval-suite-launch", "POST", f"{P}/eval-suites/<int:suite_id>/runs/", "compare.run", _candidate_body,
             201, checks=("compare.view", "compare.run", "model.view"), arrange=_arrange_eval_suite()),
    Endpoint("eval-runs-list", "GET", f"{P}/eval-runs/", "compare.view", _no_body, 200),
    Endpoint("eval-run-get", "GET", f"{P}/eval-runs/<int:run_id>/", "compare.view", _no_body, 200,
             arrange=_arrange_eval_suite("succeeded")),
    Endpoint("eval-run-cancel", "POST", f"{P}/eval-runs/<int:run_id>/cancel/", "compare.run", _no_body, 200,
             checks=("compare.view", "compare.run"), arrange=_arrange_eval_suite("queued")),
    # project API tokens (a token never creates a token)
    Endpoint("project-tokens-list", "GET", f"{P}/tokens/", "token.manage", _no_body, 200),
    Endpoint("project-token-create", "POST", f"{P}/tokens/", "token.manage",
             lambda w: {"name": "ci", "permissions": ["project.view"]}, 201, refused_to_tokens="token.manage"),
]


# --- who asks --------------------------------------------------------------------------------

CURATOR = frozenset({"project.view", "member.manage", "role.manage", "audit.view", "dataset.view"})
STEWARD = frozenset({"project.view", "dataset.import", "dataset.delete", "token.manage"})
OWNER = BUILTIN_ROLES["owner"].permissions


@dataclass(frozen=True)
class Principal:
    id: str
    role_permissions: frozenset[str] = frozenset()  # what their membership of Alpha grants
    anonymous: bool = False
    builtin_role: str = ""
    custom_role: frozenset[str] | None = None
    member_elsewhere: bool = False
    granted: frozenset[str] = frozenset()  # object grants on world.dataset
    token: Callable[[Endpoint], frozenset[str]] | None = None  # the token's permissions for a row
    token_state: str = "active"  # active | expired | revoked

    @property
    def uses_token(self) -> bool:
        return self.token is not None


PRINCIPALS = [
    Principal("anonymous", anonymous=True),
    Principal("outsider", member_elsewhere=True),
    *[Principal(key, role_permissions=role.permissions, builtin_role=key) for key, role in BUILTIN_ROLES.items()],
    Principal("custom-role-curator", role_permissions=CURATOR, custom_role=CURATOR),
    Principal("custom-role-steward", role_permissions=STEWARD, custom_role=STEWARD),
    Principal("object-grant-holder", granted=frozenset({"dataset.view"})),
    # Tokens belong to the project's owner, so only the token itself narrows what they may do.
    # Everything but the permission and what implies it (a token holds what its permissions need).
    Principal("token-lacking-the-permission", role_permissions=OWNER,
              token=lambda e: frozenset(p for p in PERMISSIONS if p != e.permission and e.permission not in implied_by(p))),
    Principal("token-holding-the-permission", role_permissions=OWNER,
              token=lambda e: frozenset(e.needs) | {"project.view"}),
    Principal("expired-token", role_permissions=OWNER, token=lambda e: frozenset(PERMISSIONS),
              token_state="expired"),
    Principal("revoked-token", role_permissions=OWNER, token=lambda e: frozenset(PERMISSIONS),
              token_state="revoked"),
]


def authenticate(client, world: World, principal: Principal, endpoint: Endpoint) -> dict:
    """Log the principal in (or make their token); returns extra request headers."""
    if principal.anonymous:
        return {}
    if principal.uses_token:
        token, raw = account_services.token_create(
            user=world.owner, name="matrix", permissions=sorted(principal.token(endpoint)), project=world.project,
            expires_at=timezone.now() + timedelta(days=1))
        if principal.token_state == "expired":
            token.expires_at = timezone.now() - timedelta(seconds=1)
            token.save()
        elif principal.token_state == "revoked":
            account_services.token_revoke(user=world.owner, api_token=token)
        return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    user = UserFactory(username=f"actor-{principal.id}")
    if principal.builtin_role:
        MembershipFactory(project=world.project, user=user, role=principal.builtin_role)
    elif principal.custom_role is not None:
        role = world.custom_role(f"Custom {principal.id}", principal.custom_role)
        MembershipFactory(project=world.project, user=user, role="", custom_role=role)
    elif principal.member_elsewhere:
        MembershipFactory(project=ProjectFactory(name="Bravo"), user=user, role="owner")
    for permission in principal.granted:
        services.grant_create(actor=world.owner, obj=world.dataset, username=user.username, permission=permission)
    client.force_login(user)
    return {}


# --- what the catalogue says should happen -----------------------------------------------------

@dataclass(frozen=True)
class Expected:
    statuses: tuple[int, ...]
    missing_permission: str | None = None


def expected(endpoint: Endpoint, principal: Principal) -> Expected:
    if principal.anonymous:
        return Expected((401, 403))
    if principal.token_state != "active":
        return Expected((401,))
    held = principal.role_permissions
    granted = principal.granted if endpoint.scope == "dataset" else frozenset()
    if principal.uses_token:
        token_permissions = with_implied(principal.token(endpoint))
        held, granted = held & token_permissions, granted & token_permissions
    held = held | granted
    if "project.view" not in held and not granted:
        return Expected((404,))  # may not know the project (or object) exists
    if endpoint.refused_to_tokens and principal.uses_token:
        return Expected((403,), endpoint.refused_to_tokens)
    for permission in endpoint.needs:
        if permission not in held and not (endpoint.any_of and permission in endpoint.any_of):
            return Expected((endpoint.refusal,), permission if endpoint.refusal == 403 else None)
    if endpoint.any_of and not held & set(endpoint.any_of):
        return Expected((endpoint.refusal,), endpoint.permission if endpoint.refusal == 403 else None)
    return Expected((endpoint.success,))


def fill(route: str, values: dict) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), route)


def send(client, method: str, url: str, body, headers: dict, multipart: bool = False):
    if method == "GET":
        return client.get(url, **headers)
    if multipart:
        return client.post(url, body, **headers)
    payload = json.dumps(body) if body is not None else ""
    return getattr(client, method.lower())(url, payload, content_type="application/json", **headers)


def body_of(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def written_audit_events() -> int:
    # A revoked token's use is recorded as token.use_after_revoked: that is not a write by the caller.
    return AuditEvent.objects.exclude(action__startswith="token.use_after_").count()


# --- the tests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("principal", PRINCIPALS, ids=[p.id for p in PRINCIPALS])
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[e.id for e in ENDPOINTS])
def test_each_principal_gets_what_the_permission_catalogue_says_on_each_endpoint(client, endpoint, principal):
    if principal.uses_token and not principal.token(endpoint):
        pytest.skip(f"every permission implies {endpoint.permission}: no token can lack it")
    world = World()
    url_values = {"project_id": world.project.pk, "dataset_id": world.dataset.pk, **endpoint.arrange(world)}
    headers = authenticate(client, world, principal, endpoint)
    url = fill(endpoint.url, url_values)
    body = endpoint.body(world)
    audit_before = written_audit_events()

    response = send(client, endpoint.method, url, body, headers, endpoint.multipart)
    content = body_of(response)

    want = expected(endpoint, principal)
    assert response.status_code in want.statuses, (
        f"{endpoint.method} {url} as {principal.id}: {response.status_code} {content[:300]!r}, "
        f"expected {want}")
    if want.missing_permission is not None:
        assert response.json()["missing_permission"] == want.missing_permission
    if response.status_code == 404:
        assert PROJECT_NAME.encode() not in content
        assert "missing_permission" not in response.json()
    succeeded = response.status_code == endpoint.success
    writes = written_audit_events() - audit_before
    assert writes == (endpoint.expected_audit_writes if succeeded else 0)


SCOPED_IDS = ("project", "dataset", "job", "comparison", "campaign", "schema", "annotation", "export", "model",
              "sweep", "classification")
# Endpoints that act only on the caller's own objects, with their tests elsewhere.
EXEMPT = {
    # Edits one's own annotation only: others get 403/404 (tests/annotation/test_campaigns.py).
    ("api/annotations/<int:annotation_id>/", "PATCH"),
}


def test_every_project_scoped_endpoint_in_the_url_conf_has_a_row():
    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern), pattern.callback

    in_url_conf = set()
    for route, callback in walk(get_resolver().url_patterns):
        view_class = getattr(callback, "view_class", None)
        if not route.startswith("api/") or view_class is None:
            continue
        if any(f"<int:{scope}_id>" in route for scope in SCOPED_IDS):
            in_url_conf |= {(route, method.upper()) for method in ("get", "post", "put", "patch", "delete")
                            if hasattr(view_class, method) and (route, method.upper()) not in EXEMPT}
    dummy = {"project_id": 1, "dataset_id": 2, "membership_id": 3, "role_id": 4, "grant_id": 5, "number": 6,
             "job_id": 7, "comparison_id": 8, "campaign_id": 9, "item_id": 10, "schema_id": 11, "annotation_id": 12,
             "export_id": 13, "model_id": 14, "entry_id": 15, "target_id": 16, "alias": "production",
             "judge_id": 17, "run_id": 18, "sweep_id": 19, "suite_id": 20,
             "classification_id": 21, "version_id": 22}
    in_table = {(resolve(fill(e.url, dummy).partition("?")[0]).route, e.method) for e in ENDPOINTS}
    assert in_url_conf, "found no project-scoped API routes: the walk above is broken"
    assert in_url_conf - in_table == set(), "project-scoped endpoints without a row in ENDPOINTS"
    assert in_table - in_url_conf == set(), "rows in ENDPOINTS for endpoints that do not exist"


def test_the_table_names_only_permissions_from_the_catalogue_and_unique_ids():
    assert len({e.id for e in ENDPOINTS}) == len(ENDPOINTS)
    for endpoint in ENDPOINTS:
        assert endpoint.permission in endpoint.needs
        assert set(endpoint.needs) <= set(PERMISSIONS), endpoint.id
    for principal in PRINCIPALS:
        assert principal.role_permissions <= set(PERMISSIONS)


def test_every_row_lets_some_principal_succeed_and_refuses_some_member_with_403():
    for endpoint in ENDPOINTS:
        outcomes = [expected(endpoint, principal) for principal in PRINCIPALS]
        assert any(o.statuses == (endpoint.success,) for o in outcomes), endpoint.id
        assert any(o.statuses == (404,) for o in outcomes), endpoint.id
        if endpoint.permission != "project.view" and endpoint.refusal == 403:  # every member holds project.view
            assert any(o.missing_permission == endpoint.permission for o in outcomes), endpoint.id
