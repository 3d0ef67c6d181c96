"""A project admin moves the production alias of a model to a fine-tuned version on the model
page, confirms, and sees it; a scientist cannot move the protected alias and is told why."""

import pytest
from playwright.sync_api import expect

from apps.projects.models import AuditEvent
from apps.registry.models import ModelAlias
from apps.registry.services import alias_set
from tests.comparison.fixtures import adapter_model_fixture  # noqa: F401
from tests.conftest import browser_login

pytestmark = pytest.mark.e2e


def test_an_admin_promotes_a_version_to_production_with_confirmation_and_sees_it(
        page, project, owner, admin, scientist, tiny_model, adapter_model):
    alias_set(user=owner, model=tiny_model, name="production", version=tiny_model.pk, protected=True)

    browser_login(page, "adam")
    page.goto(f"/projects/{project.pk}/models/{tiny_model.pk}/")
    row = page.get_by_test_id("alias-table").locator("tr[data-alias=production]")
    expect(row).to_contain_text(tiny_model.name)
    expect(row).to_contain_text("protected")
    page.get_by_label("Alias").fill("production")
    page.get_by_label("Version").select_option(label=f"{adapter_model.name} (adapter)")
    page.get_by_role("button", name="Move alias…").click()

    confirm = page.get_by_test_id("alias-confirm")
    expect(confirm).to_contain_text(f"It points at {tiny_model.name} now; it will point at {adapter_model.name}")
    assert ModelAlias.objects.get(name="production").version_id == tiny_model.pk  # nothing moved yet
    page.get_by_role("button", name=f"Move production to {adapter_model.name}").click()

    expect(page.locator(".messages")).to_contain_text(f"now points at “{adapter_model.name}”")
    row = page.get_by_test_id("alias-table").locator("tr[data-alias=production]")
    expect(row).to_contain_text(adapter_model.name)
    expect(row).to_contain_text("by adam")
    assert AuditEvent.objects.filter(action="model.alias_move", project=project).count() == 1
    page.get_by_role("link", name=adapter_model.name).first.click()
    expect(page.get_by_test_id("aliased-as")).to_contain_text(f"{tiny_model.name}@production")

    # A scientist asks to move it back from the version's page: confirmed, then refused, naming the permission.
    page.context.clear_cookies()
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/models/{tiny_model.pk}/")
    page.get_by_label("Version").select_option(label=tiny_model.name)
    page.get_by_role("button", name="Move alias…").click()
    expect(page.get_by_test_id("alias-confirm")).to_contain_text("model.promote")
    page.get_by_role("button", name=f"Move production to {tiny_model.name}").click()
    expect(page.locator(".messages")).to_contain_text("'model.promote' permission")
    assert ModelAlias.objects.get(name="production").version_id == adapter_model.pk


def test_a_site_admin_adds_a_catalogue_model_and_a_project_admin_enables_it(page, project, admin, site_admin):
    import uuid

    from django.conf import settings

    from apps.registry.models import CatalogueModel
    from apps.registry.services import run_catalogue_preparation
    from tests.registry.test_registry import tiny_model_dir

    path, _ = tiny_model_dir(settings.MODEL_ROOTS[0] / f"cat-{uuid.uuid4().hex[:8]}")
    browser_login(page, "root")
    page.goto("/models/")
    catalogue = page.get_by_test_id("site-catalogue")
    expect(catalogue).to_contain_text("The catalogue is empty.")
    catalogue.get_by_label("Name").fill("Shared tiny")
    catalogue.get_by_label("Path").fill(str(path))
    catalogue.get_by_label("Enabled in every new project").check()
    catalogue.get_by_role("button", name="Add to the catalogue").click()
    expect(page.locator(".messages")).to_contain_text("“Shared tiny” is in the catalogue")
    run_catalogue_preparation(CatalogueModel.objects.get().pk)  # what the worker does

    page.context.clear_cookies()
    browser_login(page, "adam")
    page.goto(f"/projects/{project.pk}/models/")
    entry = page.get_by_test_id("catalogue").locator("tr[data-entry='Shared tiny']")
    expect(entry).to_contain_text("not enabled")
    entry.get_by_role("button", name="Enable").click()
    expect(page.locator(".messages")).to_contain_text("“Shared tiny” is enabled in this project.")
    expect(page.get_by_test_id("models")).to_contain_text("Shared tiny")
    page.get_by_test_id("models").get_by_role("link", name="Shared tiny").click()
    expect(page.get_by_test_id("from-catalogue")).to_be_visible()
    expect(page.get_by_test_id("model-status")).to_have_text("ready")


def test_an_admin_starts_a_canary_watches_the_serving_figures_update_and_rolls_it_back(
        page, project, owner, admin, tiny_model, adapter_model):
    from apps.serving.models import Generation

    alias_set(user=owner, model=tiny_model, name="production", version=tiny_model.pk)
    alias = ModelAlias.objects.get(name="production")

    def served(version, n, **extra):
        for _ in range(n):
            Generation.objects.create(project=project, model=version, alias=alias, source="api", params={},
                                      state=extra.get("state", "succeeded"), total_s=0.5, time_to_first_token_s=0.1,
                                      prompt_tokens=10, completion_tokens=20)

    served(tiny_model, 3)
    browser_login(page, "adam")
    page.goto(f"/projects/{project.pk}/models/{tiny_model.pk}/")
    form = page.get_by_test_id("canary-form")
    form.get_by_label("Canary", exact=True).select_option(label=f"{adapter_model.name} (adapter)")
    form.get_by_label("Share of callers (%)").fill("10")
    form.get_by_label("Then step to (%)").fill("50 40")  # not rising: refused, naming the field
    form.get_by_role("button", name="Start canary").click()
    expect(page.locator(".messages")).to_contain_text("steps:")
    assert ModelAlias.objects.get(pk=alias.pk).canary_version_id is None

    form = page.get_by_test_id("canary-form")
    form.get_by_label("Canary", exact=True).select_option(label=f"{adapter_model.name} (adapter)")
    form.get_by_label("Then step to (%)").fill("50 100")
    form.get_by_label("Every (s)").fill("600")
    form.get_by_label("or p99 latency (s)").fill("2.5")
    form.get_by_role("button", name="Start canary").click()
    expect(page.locator(".messages")).to_contain_text(f"sends 10% of callers to “{adapter_model.name}”")
    traffic = page.get_by_test_id("alias-table").locator("tr[data-alias=production] [data-testid=alias-traffic]")
    expect(traffic).to_contain_text(f"{tiny_model.name} 90% · canary {adapter_model.name} 10%, next 50% → 100%")

    table = page.get_by_test_id("serving-table")
    stable_row = table.locator(f"tr[data-version='{tiny_model.pk}'][data-alias=production]")
    expect(stable_row).to_contain_text("3")
    expect(stable_row).to_contain_text("30 / 60")  # tokens in / out
    expect(page.get_by_test_id("serving-chart").locator(".main-svg").first).to_be_visible()
    served(adapter_model, 2)  # the canary answers meanwhile: the page shows it without a reload
    canary_row = table.locator(f"tr[data-version='{adapter_model.pk}'][data-alias=production]")
    expect(canary_row).to_contain_text(adapter_model.name, timeout=25_000)
    expect(canary_row.locator("td").nth(2)).to_have_text("2")

    page.once("dialog", lambda dialog: dialog.accept())
    traffic.get_by_role("button", name="Roll back").click()
    expect(page.locator(".messages")).to_contain_text(f"serves “{tiny_model.name}” to everyone again")
    expect(page.get_by_test_id("alias-table").locator("tr[data-alias=production] [data-testid=alias-traffic]")
           ).to_have_text(f"all to {tiny_model.name}")
    assert AuditEvent.objects.filter(action="model.alias_rollback", actor=admin).count() == 1


def test_an_admin_turns_request_logging_on_and_sees_the_captured_traffic(page, project, owner, admin, tiny_model):
    from apps.serving.models import Capture

    alias_set(user=owner, model=tiny_model, name="production", version=tiny_model.pk)
    alias = ModelAlias.objects.get(name="production")
    browser_login(page, "adam")
    page.goto(f"/projects/{project.pk}/models/{tiny_model.pk}/")
    form = page.get_by_test_id("capture-form").filter(has_text="@production")
    expect(form.get_by_label("Log requests")).not_to_be_checked()  # off by default
    form.get_by_label("Log requests").check()
    form.get_by_label("Keep (days)").fill("-1")
    form.get_by_role("button", name="Save").click()
    expect(form.get_by_test_id("capture-status")).to_contain_text("retention_days")
    assert not ModelAlias.objects.get(pk=alias.pk).capture_enabled  # refused: nothing changed

    form.get_by_label("Keep (days)").fill("14")
    form.get_by_label("Sample (0-1)").fill("0.5")
    form.get_by_role("button", name="Save").click()
    expect(form.get_by_test_id("capture-status")).to_have_text("Logging 50% of requests, kept 14 days, redacted.")
    alias.refresh_from_db()
    assert (alias.capture_enabled, alias.capture_sample_rate, alias.capture_retention_days) == (True, 0.5, 14)

    Capture.objects.create(project=project, alias=alias, version=tiny_model, completion_id="chatcmpl-7",
                           messages=[{"role": "user", "content": "Where is <b>[EMAIL]</b>?"}], response="Here.",
                           feedback_score=1)
    captured = page.get_by_test_id("capture-list").filter(has_text="Where is")
    expect(captured).to_contain_text("Where is <b>[EMAIL]</b>? → Here. (feedback 1)", timeout=25_000)  # as text


def test_an_admin_starts_a_canary_judged_for_quality_and_sees_each_version_s_quality(
        page, project, owner, admin, tiny_model, adapter_model):
    from apps.evaluation.models import Judge
    from apps.serving.models import Capture, Generation
    from tests.comparison.factories import placeholder_model
    from tests.evaluation.fixtures import calibrate

    alias_set(user=owner, model=tiny_model, name="production", version=tiny_model.pk)
    ModelAlias.objects.filter(name="production").update(capture_enabled=True)
    alias = ModelAlias.objects.get(name="production")
    rubric = {"kind": "pointwise", "criteria": [{"name": "correct", "scale": "pass_fail"}]}
    judge = Judge.objects.create(project=project, name="Correctness", rubric=rubric,
                                 local_model=placeholder_model(project, "Judge model"))
    calibrate(judge, owner)
    Judge.objects.create(project=project, name="Fresh", rubric=rubric, local_model=judge.local_model)

    browser_login(page, "adam")
    page.goto(f"/projects/{project.pk}/models/{tiny_model.pk}/")
    form = page.get_by_test_id("canary-form")
    form.get_by_label("Canary", exact=True).select_option(label=f"{adapter_model.name} (adapter)")
    form.get_by_label("Quality judge").select_option(label="Fresh (not calibrated)")
    form.get_by_label("roll back when its score falls more than (0-1)").fill("0.2")
    form.get_by_role("button", name="Start canary").click()
    expect(page.locator(".messages")).to_contain_text("quality_judge: The judge “Fresh” is not calibrated")
    assert ModelAlias.objects.get(pk=alias.pk).canary_version_id is None

    form = page.get_by_test_id("canary-form")
    form.get_by_label("Canary", exact=True).select_option(label=f"{adapter_model.name} (adapter)")
    form.get_by_label("Quality judge").select_option(label="Correctness")
    form.get_by_label("roll back when its score falls more than (0-1)").fill("0.2")
    form.get_by_label("judged from (requests)").fill("2")
    form.get_by_role("button", name="Start canary").click()
    expect(page.locator(".messages")).to_contain_text(f"sends 10% of callers to “{adapter_model.name}”")
    health = page.get_by_test_id("canary-health")
    expect(health).to_contain_text("Quality (Correctness)")
    expect(health.locator("tr[data-side=canary]")).to_contain_text("– (0 judged)")
    expect(page.get_by_test_id("aliases")).to_contain_text("falls more than 0.2 below the stable version's, once each "
                                                           "side has 2 judged answers")

    # What the inference worker's judging writes: each answer served and captured, with its judge score.
    for version, texts in ((tiny_model, [("Paris.", 1.0), ("It is Paris.", 1.0)]),
                           (adapter_model, [("Paris.", 1.0), ("Lyon.", 0.0)])):
        for text, score in texts:
            generation = Generation.objects.create(project=project, model=version, alias=alias, source="api",
                                                   params={}, state="succeeded", output=text, total_s=0.5)
            Capture.objects.create(project=project, alias=alias, version=version, generation=generation,
                                   completion_id=f"chatcmpl-{generation.pk}", messages=[{"role": "user", "content": "?"}],
                                   response=text, judged_by=judge, judge_score=score)
    page.reload()
    health = page.get_by_test_id("canary-health")
    expect(health.locator("tr[data-side=canary]")).to_contain_text("0.50 (2 judged)")
    expect(health.locator("tr[data-side=stable]")).to_contain_text("1.00 (2 judged)")
    expect(health.locator("tr[data-side=stable]")).to_contain_text("0%")  # its error rate beside it
    table = page.get_by_test_id("serving-table")
    expect(table.locator("thead th").nth(6)).to_have_text("Quality")
    expect(table.locator(f"tr[data-version='{adapter_model.pk}'][data-alias=production] td").nth(6)
           ).to_have_text("0.50 (2 judged)", timeout=25_000)
    expect(table.locator(f"tr[data-version='{tiny_model.pk}'][data-alias=production] td").nth(6)
           ).to_have_text("1.00 (2 judged)")
