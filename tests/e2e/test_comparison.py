"""A scientist compares the tiny base model with an adapter of it and watches the grid fill; an
annotator votes blind with the keyboard; the leaderboard counts the votes."""

import pytest
from playwright.sync_api import expect

from apps.comparison.models import Comparison, Vote
from tests.comparison.fixtures import adapter_model_fixture  # noqa: F401
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT_PROMPT = "<img src=x onerror=alert(1)> what is paris ?"


def log_out(page):
    page.get_by_role("button", name="Log out").click()


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_scientist_compares_annotator_votes_blind_and_the_leaderboard_updates(page, scientist, annotator, project,
                                                                              tiny_model, adapter_model,
                                                                              inference_worker):
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/")
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Compare").click()
    expect(page.get_by_test_id("comparisons")).to_contain_text("No comparison yet")
    page.get_by_role("link", name="New comparison").click()
    page.get_by_label("Name", exact=True).fill("Base vs adapter")
    page.get_by_label("Model 1").select_option(label=tiny_model.name)
    page.get_by_label("Model 2").select_option(label=f"{adapter_model.name} (adapter of {tiny_model.name})")
    page.get_by_label("Prompts").fill(f"what is the capital of france ?\n{SCRIPT_PROMPT}")
    page.get_by_label("Max new tokens").fill("6")
    page.get_by_role("button", name="Run comparison").click()

    # The grid fills live: 2 prompts x 2 models.
    expect(page.get_by_test_id("comparison-state")).to_have_text("succeeded", timeout=120_000)
    expect(page.get_by_test_id("cells-done")).to_have_text("4")
    grid = page.get_by_test_id("grid")
    expect(grid.locator("td.cell[data-filled=true]")).to_have_count(4)
    expect(grid.locator("tbody tr").nth(1).locator("th")).to_have_text(SCRIPT_PROMPT)  # text, not markup
    expect(grid.locator("tbody img")).to_have_count(0)
    comparison = Comparison.objects.get()
    first_output = comparison.outputs.order_by("prompt__position", "contestant__position").first()
    expect(grid.locator(f"[data-cell='{first_output.prompt_id}-{first_output.contestant_id}'] [data-field=text]")
           ).to_have_text(first_output.text)
    expect(grid.locator(".cell-meta").first).to_contain_text("tok/s")
    expect(page.get_by_test_id("summaries")).to_contain_text("2 outputs")  # updated live with the cells
    # a word diff against the base model's column marks words in the adapter's column
    page.get_by_label("Word diff against").select_option(label=tiny_model.name)
    expect(grid.locator("ins.diff, del.diff").first).to_be_visible()

    page.get_by_role("link", name="Leaderboard").click()
    expect(page.get_by_test_id("total-votes")).to_have_text("0")
    log_out(page)

    # The annotator votes blind, with the keyboard only.
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/")
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Compare").click()
    page.get_by_role("link", name="Vote").click()
    vote = page.get_by_test_id("vote")
    expect(page.get_by_test_id("vote-prompt")).not_to_be_empty()
    expect(vote).not_to_contain_text(tiny_model.name)  # no model name before the vote
    expect(page.get_by_test_id("vote-progress")).to_contain_text("0 voted")
    left = int(page.get_by_test_id("vote-progress").inner_text().split("·")[1].split()[0])
    page.keyboard.press("1")
    expect(page.get_by_test_id("vote-result")).to_contain_text("You voted: A is better")
    expect(page.get_by_test_id("vote-progress")).to_have_text(f"1 voted · {left - 1} left")  # counted at once
    expect(page.get_by_test_id("model-a")).to_contain_text(tiny_model.name)  # revealed after the vote
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("vote-progress")).to_contain_text("1 voted")
    expect(page.get_by_test_id("vote-result")).to_have_text("")
    page.keyboard.press("ArrowRight")
    expect(page.get_by_test_id("vote-result")).to_contain_text("You voted: B is better")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("vote-done")).to_be_visible()
    expect(vote.locator("img")).to_have_count(0)  # the prompt with markup was shown as text
    assert Vote.objects.filter(voter=annotator).count() == 2
    log_out(page)

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/leaderboard/")
    expect(page.get_by_test_id("total-votes")).to_have_text("2")
    board = page.get_by_test_id("leaderboard")
    expect(board.locator("tbody tr")).to_have_count(2)
    expect(board.locator("[data-field=votes]").first).to_have_text("2")
    expect(page.locator("#win-matrix .heatmaplayer, #win-matrix .hm")).not_to_have_count(0)
    assert dialogs == []


MARKUP = '<img src=x onerror=alert(1)><script>alert(2)</script><a href="javascript:alert(3)">x</a>'


def test_markup_in_outputs_is_inert_in_the_grid_the_diff_and_the_vote_page(page, owner, scientist, project):
    from tests.comparison.factories import make_comparison

    comparison = make_comparison(project, owner, prompts=[f"say {MARKUP}"])
    comparison.outputs.filter(contestant__position=0).update(text=f"plain {MARKUP}")
    comparison.outputs.filter(contestant__position=1).update(text=f"other {MARKUP} words")
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/")
    grid = page.get_by_test_id("grid")
    expect(grid.locator("td.cell[data-filled=true]")).to_have_count(2)
    expect(grid.locator("td.cell").first.locator("[data-field=text]")).to_have_text(f"plain {MARKUP}")
    first_model = comparison.contestants.get(position=0).model.name
    page.get_by_label("Word diff against").select_option(label=first_model)
    expect(grid.locator("td.cell").nth(1).locator("ins.diff").first).to_be_visible()
    expect(grid.locator("td.cell").nth(1)).to_contain_text(MARKUP)
    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/vote/")
    expect(page.get_by_test_id("answer-a")).to_contain_text(MARKUP)
    expect(page.get_by_test_id("vote-prompt")).to_have_text(f"say {MARKUP}")
    for where in (page.get_by_test_id("vote"),):
        expect(where.locator("img, script, a[href^='javascript']")).to_have_count(0)
    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/")
    expect(grid.locator("img, script, a[href^='javascript']")).to_have_count(0)
    assert dialogs == []


def test_outputs_read_as_markdown_and_the_grid_sorts_and_filters_by_a_metric(page, owner, scientist, project):
    from apps.comparison.models import Output
    from tests.comparison.factories import make_comparison

    prompts = ["short one", "a code answer", "a failing one"]
    comparison = make_comparison(project, owner, prompts=prompts, references=["x", "y", "z"])
    first, second = comparison.contestants.order_by("position")
    cell = {(o.prompt.position, o.contestant_id): o for o in Output.objects.filter(comparison=comparison)}
    for (position, _), output in cell.items():
        output.scores = {"exact_match": 0, "rouge_l": [0.2, 0.9, 0.5][position], "perplexity": 3.0}
        output.completion_tokens = [5, 40, 12][position]
        output.save()
    Output.objects.filter(pk=cell[(1, first.pk)].pk).update(
        text="Use this:\n\n```python\nprint('**not bold**')\n```\n\nand **this** is bold <b>not html</b>")
    Output.objects.filter(pk=cell[(2, second.pk)].pk).update(text="", error="The model failed.")
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/")
    grid = page.get_by_test_id("grid")
    code_cell = grid.locator(f"[data-cell='{cell[(1, first.pk)].prompt_id}-{first.pk}'] [data-field=text]")
    expect(code_cell.locator("pre code")).to_have_text("print('**not bold**')")
    expect(code_cell.locator("strong")).to_have_text("this")
    expect(code_cell).to_contain_text("<b>not html</b>")  # raw HTML stays text
    expect(code_cell.locator("b")).to_have_count(0)

    rows = grid.locator("tbody tr")
    expect(page.get_by_test_id("grid-shown")).to_have_text("3 of 3 prompts")
    page.get_by_label("Sort prompts by").select_option(label="ROUGE-L, best first")
    page.get_by_label("of", exact=True).select_option(label=first.model.name)
    expect(rows.locator("th")).to_have_text(["a code answer", "a failing one", "short one"])
    page.get_by_label("Sort prompts by").select_option(label="length, shortest first")
    expect(rows.locator("th")).to_have_text(["short one", "a failing one", "a code answer"])
    page.get_by_label("Show").select_option(label="prompts with a failed answer")
    expect(page.get_by_test_id("grid-shown")).to_have_text("1 of 3 prompts")
    expect(rows.filter(visible=True).locator("th")).to_have_text(["a failing one"])
    page.get_by_label("Show").select_option(label="every prompt")
    expect(rows.filter(visible=True)).to_have_count(3)
    # The summaries are the server's: one failed output for the second model
    expect(page.locator(f"[data-summary='{second.pk}']")).to_contain_text("3 outputs, 1 failed")

    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/vote/")
    answers = page.get_by_test_id("answer-a").or_(page.get_by_test_id("answer-b"))
    expect(answers.first).not_to_be_empty()
