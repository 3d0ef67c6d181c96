"""Annotation in the browser: a scientist creates a campaign, an annotator works ten items with
the keyboard only and finds her progress after a reload, another highlights spans, rewrites a
response against its diff and rates it, a reviewer settles a disagreement, and the admin sees
the agreement chart."""

import pytest
from playwright.sync_api import expect

from apps.annotation.models import Annotation, Campaign, Item, LabelSchema, SuggestionRun
from apps.datasets.models import Dataset
from apps.datasets.writer import write_version
from tests.annotation.fixtures import answer, make_campaign, make_schema, next_item, submit
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KEYBOARD_FIELDS = [
    {"name": "sentiment", "type": "single_label", "labels": ["positive", "negative", "neutral"]},
    {"name": "better", "type": "preference", "candidates": ["response", "metadata.response_b"]},
]


def test_a_scientist_creates_a_campaign_from_a_ready_made_form(page, scientist, project, review_version):
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/")
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Annotation").click()
    page.get_by_role("link", name="New campaign").click()
    page.get_by_label("Name").fill("Sentiment pass")
    page.get_by_label("Annotation form").select_option(label="Classify")
    page.get_by_label("Overlap").fill("0")
    page.get_by_role("button", name="Create campaign").click()
    expect(page.locator(".field-error")).to_contain_text("overlap")  # the service's check, on its field
    page.get_by_label("Overlap").fill("2")
    page.get_by_label("Guidelines").fill("## Rules\n<script>document.title='pwned'</script>\n\n*Label the tone*")
    page.get_by_role("button", name="Create campaign").click()
    expect(page.get_by_test_id("campaign-name")).to_have_text("Sentiment pass")
    expect(page.get_by_test_id("campaign-progress")).to_contain_text("0 / 20 annotations")
    page.get_by_text("Guidelines").click()
    expect(page.locator(".guidelines")).to_contain_text("<script>document.title='pwned'</script>")  # as text
    assert page.title() != "pwned"
    assert Campaign.objects.get().schema.fields[0]["name"] == "label"
    assert LabelSchema.objects.count() == 1  # the refused first try left no form behind


def test_classify_labels_come_from_the_version_are_edited_in_the_form_and_each_gets_a_key(
        page, scientist, annotator, project, review_version):
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/new/")
    page.get_by_label("Name").fill("Tone")
    page.get_by_label("Annotation form").select_option(label="Custom (JSON below)")
    editor = page.get_by_test_id("label-editor")
    expect(editor).to_be_hidden()  # only for Classify
    page.get_by_label("Annotation form").select_option(label="Classify")
    expect(editor.get_by_role("textbox", name="Label 1")).to_have_value("negative")  # the version's labels
    expect(editor.get_by_role("textbox", name="Label 2")).to_have_value("positive")
    editor.get_by_role("textbox", name="Label 2").fill("glad")  # rename
    editor.get_by_role("button", name="Remove negative").click()
    expect(editor.get_by_role("textbox", name="Label 1")).to_have_value("glad")
    for n in range(1, 11):
        editor.get_by_role("textbox", name="New label").fill(f"topic {n}")
        editor.get_by_role("textbox", name="New label").press("Enter")  # adds; does not send the form
    editor.get_by_role("textbox", name="New label").fill("glad")
    editor.get_by_role("button", name="Add label").click()
    expect(page.get_by_test_id("label-note")).to_have_text("“glad” is already listed.")
    keys = editor.get_by_test_id("label-key")
    expect(keys).to_have_count(11)
    expect(keys.nth(8)).to_have_text("key 9")
    expect(keys.nth(9)).to_have_text("key i")  # past the ninth: letters the page does not keep
    expect(keys.nth(10)).to_have_text("key j")
    page.get_by_role("button", name="Create campaign").click()
    expect(page.get_by_test_id("campaign-name")).to_have_text("Tone")
    labels = Campaign.objects.get().schema.fields[0]["labels"]
    assert [(label["value"], label["hotkey"]) for label in labels] == [
        ("glad", "1"), *((f"topic {n}", str(n + 1)) for n in range(1, 9)), ("topic 9", "i"), ("topic 10", "j")]

    page.get_by_role("button", name="Log out").click()
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{Campaign.objects.get().pk}/annotate/")
    expect(page.get_by_test_id("item-title")).to_have_text("Example 1")
    page.keyboard.press("j")
    expect(page.get_by_label("[j] topic 10")).to_be_checked()
    page.keyboard.press("?")
    shortcuts = page.get_by_test_id("shortcut-list")
    expect(shortcuts).to_contain_text("1 — label: glad")
    expect(shortcuts).to_contain_text("i — label: topic 9")
    expect(shortcuts).to_contain_text("j — label: topic 10")
    page.keyboard.press("Escape")
    page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("item-title")).to_have_text("Example 2")
    assert Annotation.objects.get().values == {"label": "topic 10"}


def test_labels_past_the_page_letters_are_typed_with_shift_and_listed_so(page, client, scientist, annotator,
                                                                         project, review_version):
    client.force_login(scientist)
    fields = [{"name": "topic", "type": "single_label", "labels": [f"t{n}" for n in range(1, 46)]}]
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, fields))
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/annotate/")
    expect(page.get_by_test_id("item-title")).to_have_text("Example 1")
    page.keyboard.press("Shift+I")  # the 25th: 9 digits and 15 letters are taken
    expect(page.get_by_label("[Shift+I] t25")).to_be_checked()
    # Past the 39 single keys: chords. The first key waits, said on the page, for the second.
    page.keyboard.press("0")
    expect(page.get_by_test_id("chord-note")).to_have_text("0 then …")
    expect(page.get_by_label("[Shift+I] t25")).to_be_checked()
    page.keyboard.press("2")
    expect(page.get_by_label("[0 then 2] t41")).to_be_checked()
    expect(page.get_by_test_id("chord-note")).to_have_text("")
    page.keyboard.press("2")  # alone again: the second label
    expect(page.get_by_label("[2] t2")).to_be_checked()
    page.keyboard.press("?")
    shortcuts = page.get_by_test_id("shortcut-list")
    expect(shortcuts).to_contain_text("Shift+I — topic: t25")
    expect(shortcuts).to_contain_text("0 then 6 — topic: t45")


def test_an_annotator_does_ten_items_with_the_keyboard_and_finds_her_progress_after_a_reload(
        page, client, scientist, annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, KEYBOARD_FIELDS),
                             guidelines="Pick the **kinder** reply.")
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/annotate/")
    expect(page.get_by_test_id("guidelines")).to_contain_text("Pick the kinder reply.")
    title = page.get_by_test_id("item-title")
    for position in range(10):
        expect(title).to_have_text(f"Example {position + 1}")
        expect(page.get_by_test_id("candidate-B")).to_contain_text(f"Noted ({position}).")
        page.keyboard.press("2" if position % 2 else "1")  # negative / positive
        page.keyboard.press("b" if position == 3 else "a")
        page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("done")).to_be_visible()
    expect(page.get_by_test_id("progress")).to_contain_text("Mine: 10")
    assert Annotation.objects.filter(annotator=annotator).count() == 10
    fourth = Annotation.objects.get(item__position=3)
    assert fourth.values == {"sentiment": "negative", "better": "B"} and fourth.time_spent_ms > 0

    page.reload()
    expect(page.get_by_test_id("done")).to_be_visible()
    expect(page.get_by_test_id("progress")).to_contain_text("Mine: 10")

    # Back to the last one with Backspace, fix it with the keyboard, save.
    page.keyboard.press("Backspace")
    expect(title).to_contain_text("Example 10 — fixing your answer")
    expect(page.get_by_label("[2] negative")).to_be_checked()
    page.keyboard.press("3")
    page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("done")).to_be_visible()
    fixed = Annotation.objects.get(item__position=9)
    assert fixed.values["sentiment"] == "neutral" and fixed.revision == 2

    page.keyboard.press("?")
    expect(page.get_by_test_id("shortcuts")).to_contain_text("Ctrl+Enter — submit")


def test_an_annotator_skips_a_bad_answer_is_refused_on_its_field_and_a_draft_survives_a_reload(
        page, client, scientist, annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, KEYBOARD_FIELDS))
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/annotate/")
    title = page.get_by_test_id("item-title")
    expect(title).to_have_text("Example 1")
    page.keyboard.press("s")
    expect(title).to_have_text("Example 2")
    page.keyboard.press("1")  # no preference yet
    page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("error")).to_contain_text("values.better")
    expect(page.get_by_test_id("status")).to_have_text("Draft saved.")
    page.reload()
    expect(title).to_have_text("Example 2")  # my lease brings it back
    expect(page.get_by_label("[1] positive")).to_be_checked()  # from the draft
    assert Item.objects.get(campaign_id=campaign["id"], position=0).completed == 0


def test_a_reviewer_settles_a_disagreement_and_the_admin_sees_the_agreement_chart(
        page, client, scientist, admin, annotator, second_annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, KEYBOARD_FIELDS),
                             overlap=2, sample=2, seed=4)
    for user, labels in ((annotator, ["positive", "negative"]), (second_annotator, ["negative", "negative"])):
        client.force_login(user)
        for label in labels:
            item = next_item(client, campaign).json()
            assert submit(client, campaign, item["id"], {"sentiment": label, "better": "A"}).status_code == 201

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/")
    page.get_by_role("link", name="Disagreements").click()
    items = page.get_by_test_id("review-item")
    expect(items).to_have_count(1)
    items.first.locator("tr[data-annotator=ben]").get_by_role("button", name="Use this answer").click()
    expect(page.get_by_test_id("review-empty")).to_have_text("No disagreements left to settle.")
    settled = Item.objects.get(campaign_id=campaign["id"], position=0)
    assert settled.adjudicated_values == {"sentiment": "negative", "better": "A"}
    assert settled.adjudicated_by == scientist
    # The settled example becomes gold, scoring annotators from now on.
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/review/")
    first = page.get_by_test_id("review-item").first
    first.locator("tr[data-annotator=ben]").get_by_role("button", name="Make gold with this answer").click()
    expect(page.get_by_test_id("review-item").first).to_contain_text("gold")
    assert Item.objects.get(pk=settled.pk).gold_values == {"sentiment": "negative", "better": "A"}

    page.get_by_role("button", name="Log out").click()
    browser_login(page, "adam")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/")
    expect(page.get_by_test_id("agreement")).to_contain_text("sentiment")
    expect(page.get_by_test_id("annotators")).to_contain_text("anna")
    chart = page.get_by_test_id("agreement-chart")
    expect(chart.locator(".main-svg").first).to_be_visible()
    expect(chart).to_contain_text("Agreement per field")


def test_an_annotator_ranks_three_responses_with_the_keyboard(page, client, scientist, annotator, project,
                                                               review_version):
    client.force_login(scientist)
    fields = [{"name": "order", "type": "ranking",
               "candidates": ["response", "metadata.response_b", "metadata.shop"]}]
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, fields))
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/annotate/")
    candidates = page.get_by_test_id("candidates-order")
    expect(candidates.get_by_test_id("candidate-A")).to_contain_text("Thanks for review 0!")  # what is ranked
    expect(candidates.get_by_test_id("candidate-C")).to_contain_text("north")
    ranking = page.get_by_test_id("ranking-order")
    page.keyboard.press("b")
    page.keyboard.press("c")
    expect(ranking).to_have_text("best: BC")
    page.keyboard.press("c")  # taken back
    page.keyboard.press("a")
    page.get_by_role("button", name="rank C next").click()
    expect(ranking.get_by_role("listitem")).to_have_text(["best: B", "A", "C"])
    expect(page.get_by_role("button", name="rank A next")).to_have_attribute("aria-pressed", "true")
    page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("item-title")).to_have_text("Example 2")
    assert Annotation.objects.get(annotator=annotator).values == {"order": ["B", "A", "C"]}


def test_a_manager_watches_the_campaign_progress_move_as_annotators_answer(page, client, scientist, annotator,
                                                                            project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, overlap=2)
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/")
    progress = page.get_by_test_id("campaign-progress")
    expect(progress).to_contain_text("0 / 20 annotations")
    expect(progress.locator("[data-field=live]")).to_be_visible()  # listening
    client.force_login(annotator)
    for _ in range(2):
        item = next_item(client, campaign).json()
        assert submit(client, campaign, item["id"], answer()).status_code == 201
    expect(progress).to_contain_text("2 / 20 annotations")  # no reload
    expect(progress.get_by_role("progressbar")).to_have_attribute("value", "2")


def watch_two_annotators_answer_two_examples(page, client, scientist, annotator, second_annotator, project,
                                             review_version):
    """The manager's dashboard open, live, while both annotators answer both examples: both prefer A;
    on sentiment they agree on the first and not the second. Returns the annotator table."""
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, KEYBOARD_FIELDS),
                             overlap=2, sample=2, seed=4)
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/")
    people = page.get_by_test_id("annotators")
    expect(people).to_contain_text("No annotations yet.")
    expect(page.get_by_test_id("campaign-progress").locator("[data-field=live]")).to_be_visible()
    for user, labels in ((annotator, ["positive", "positive"]), (second_annotator, ["positive", "negative"])):
        client.force_login(user)
        for label in labels:
            item = next_item(client, campaign).json()
            assert submit(client, campaign, item["id"], {"sentiment": label, "better": "A"}).status_code == 201
    expect(page.get_by_test_id("campaign-progress")).to_contain_text("4 / 4 annotations")
    return people


def test_a_manager_watches_agreement_and_the_annotator_table_move_as_annotators_answer(
        page, client, scientist, annotator, second_annotator, project, review_version):
    people = watch_two_annotators_answer_two_examples(page, client, scientist, annotator, second_annotator, project,
                                                      review_version)
    # No reload. Sentiment by hand: item agreements 1 and 0, P = 0.5; answers 3 positive, 1
    # negative, P_e = (3/4)^2 + (1/4)^2 = 0.625; Fleiss' kappa = (0.5 - 0.625) / (1 - 0.625) = -0.333.
    # Krippendorff: coincidences pos-pos 2, pos-neg 1, neg-pos 1 (n = 4, n_pos = 3, n_neg = 1):
    # D_o = 2/4, D_e = 2 * 3 * 1 / (4 * 3) = 0.5, alpha = 1 - D_o / D_e = 0.
    # Agreement with consensus: sentiment 1/2 (the split example has none), better 2/2; mean 0.75.
    sentiment = page.get_by_test_id("agreement").locator("tr", has_text="sentiment")
    expect(sentiment.locator("td")).to_have_text(["sentiment", "nominal", "2", "-0.333", "0.000", "1"])
    for name in ("anna", "ben"):
        expect(people.locator("tr", has_text=name).locator("td").nth(1)).to_have_text("2")
        expect(people.locator("tr", has_text=name).locator("td").nth(4)).to_have_text("0.75")
    expect(page.get_by_test_id("agreement-chart")).to_contain_text("Agreement per field")


def test_past_the_inline_limit_a_worker_computes_the_agreement_and_the_dashboard_follows(
        settings, celery_worker, page, client, scientist, annotator, second_annotator, project, review_version):
    settings.QUALITY_INLINE_MAX_ANSWERS = 2  # a large campaign, as far as the web process is concerned
    people = watch_two_annotators_answer_two_examples(page, client, scientist, annotator, second_annotator, project,
                                                      review_version)
    # 4 answers: past the limit, so the worker computed these; the page was told, no reload.
    # The same hand-checked values as the test above: Fleiss' kappa -0.333, alpha 0, consensus 0.75.
    sentiment = page.get_by_test_id("agreement").locator("tr", has_text="sentiment")
    expect(sentiment.locator("td")).to_have_text(["sentiment", "nominal", "2", "-0.333", "0.000", "1"], timeout=30_000)
    for name in ("anna", "ben"):
        expect(people.locator("tr", has_text=name).locator("td").nth(4)).to_have_text("0.75")
    expect(page.get_by_test_id("quality-computing")).to_have_count(0)
    page.reload()
    expect(sentiment.locator("td")).to_have_text(["sentiment", "nominal", "2", "-0.333", "0.000", "1"])


def test_the_annotators_campaign_count_moves_as_everyone_answers(page, client, scientist, annotator,
                                                                  second_annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, KEYBOARD_FIELDS),
                             overlap=2)
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/annotate/")
    progress = page.get_by_test_id("progress")
    expect(progress).to_have_text("Mine: 0 · campaign: 0 / 20 annotations")
    client.force_login(second_annotator)  # ben works meanwhile
    for _ in range(2):
        item = next_item(client, campaign).json()
        assert submit(client, campaign, item["id"], {"sentiment": "positive", "better": "A"}).status_code == 201
    expect(progress).to_have_text("Mine: 0 · campaign: 2 / 20 annotations")  # no reload, no answer of hers
    page.keyboard.press("1")
    page.keyboard.press("a")
    page.keyboard.press("Control+Enter")
    expect(progress).to_have_text("Mine: 1 · campaign: 3 / 20 annotations")


def test_a_suggestions_pre_fill_and_its_diff_survive_a_reload(page, client, scientist, annotator, project,
                                                              review_version):
    client.force_login(scientist)
    fields = [{"name": "sentiment", "type": "single_label", "labels": ["positive", "negative", "neutral"]},
              {"name": "ideal", "type": "text", "prefill": "response", "required": True}]
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, fields), sample=1)
    # What a finished suggestion job leaves: the form starts its text from the model's draft.
    schema = LabelSchema.objects.get(campaigns__id=campaign["id"])
    schema.fields[1]["prefill"] = "suggestion"
    schema.save(update_fields=["fields"])
    suggestion = {"model": None, "values": {"sentiment": "negative", "ideal": "The parcel was late."}}
    Item.objects.filter(campaign_id=campaign["id"]).update(suggestion=suggestion)
    SuggestionRun.objects.create(campaign_id=campaign["id"], state="succeeded")

    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/annotate/")
    title = page.get_by_test_id("item-title")
    expect(title).to_have_text("Example 1 — pre-filled by the model: check it")
    expect(page.get_by_label("[2] negative")).to_be_checked()
    ideal = page.get_by_label("ideal")
    expect(ideal).to_have_value("The parcel was late.")
    ideal.press("End")
    ideal.type(" Sorry!")
    expect(page.get_by_test_id("diff").locator("ins")).to_contain_text(["Sorry!"])
    expect(page.get_by_test_id("status")).to_have_text("Draft saved.")

    page.reload()
    expect(title).to_have_text("Example 1 — pre-filled by the model: check it")  # still the model's draft
    expect(ideal).to_have_value("The parcel was late. Sorry!")  # her draft
    diff = page.get_by_test_id("diff")  # against the suggestion, still
    expect(diff.locator("ins", has_text="Sorry!")).to_have_count(1)
    expect(diff.locator("del")).to_have_count(0)
    expect(page.get_by_label("[2] negative")).to_be_checked()
    page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("done")).to_be_visible()
    kept = Annotation.objects.get(annotator=annotator)
    assert kept.values == {"sentiment": "negative", "ideal": "The parcel was late. Sorry!"}
    assert kept.suggestion == suggestion


SELECT_IN_SOURCE = """([testid, wanted]) => {
  // What a mouse drag over `wanted` in the span source leaves: a selection of those characters,
  // across whatever highlights they cross.
  const source = document.querySelector(`[data-testid="${testid}"]`);
  const at = source.textContent.indexOf(wanted);
  if (at < 0) return false;
  const range = document.createRange();
  let seen = 0;
  const walker = document.createTreeWalker(source, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const length = node.data.length;
    if (seen <= at && at <= seen + length) range.setStart(node, at - seen);
    if (seen <= at + wanted.length && at + wanted.length <= seen + length) { range.setEnd(node, at + wanted.length - seen); break; }
    seen += length;
  }
  getSelection().removeAllRanges();
  getSelection().addRange(range);
  return true;
}"""


def test_an_annotator_highlights_spans_rewrites_the_response_against_its_diff_and_rates_it(
        page, client, scientist, annotator, project, owner):
    prompt = "\U0001F4E6 Review: the parcel from Jo arrived <b>late</b>"
    records = [{"id": f"p{i}", "prompt": prompt, "response": "Thanks, Jo!", "response_b": "Noted."} for i in range(2)]
    version = write_version(dataset=Dataset.objects.create(project=project, name="Parcels", created_by=owner),
                            records=records, roles={"id": "id", "prompt": "prompt", "response": "response"})
    client.force_login(scientist)
    campaign = make_campaign(client, project, version)  # every kind of field: SCHEMA_FIELDS
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/annotate/")
    expect(page.get_by_test_id("item-title")).to_have_text("Example 1")
    source = page.get_by_test_id("span-source-pii")
    expect(source).to_contain_text("arrived <b>late</b>")  # the markup is text, not bold
    expect(source.locator("b")).to_have_count(0)

    page.keyboard.press("1")  # sentiment: positive
    page.keyboard.press("k")  # topics: billing
    page.keyboard.press("a")  # better: A
    assert page.evaluate(SELECT_IN_SOURCE, ["span-source-pii", "Jo"])
    page.get_by_role("button", name="Mark selection as name").click()
    assert page.evaluate(SELECT_IN_SOURCE, ["span-source-pii", "<b>late</b>"])  # after the emoji and the mark
    page.get_by_role("button", name="Mark selection as email").click()
    expect(source.get_by_test_id("span-mark")).to_have_text(["Jo", "<b>late</b>"])
    page.get_by_label("4", exact=True).check()

    ideal = page.get_by_label("ideal")
    expect(ideal).to_have_value("Thanks, Jo!")  # pre-filled from the response
    ideal.fill("Thanks a lot, Jo!")
    diff = page.get_by_test_id("diff")
    expect(diff.locator("del")).to_have_text(["Thanks,"])
    expect(diff.locator("ins", has_text="lot,")).to_have_count(1)
    page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("item-title")).to_have_text("Example 2")

    values = Annotation.objects.get(annotator=annotator).values
    # Offsets count characters as Python does (the emoji is one), whatever the browser counts.
    assert [(prompt[s["start"]:s["end"]], s["label"]) for s in values["pii"]] == [("Jo", "name"),
                                                                                  ("<b>late</b>", "email")]
    assert {key: values[key] for key in ("sentiment", "topics", "better", "helpfulness", "ideal")} == {
        "sentiment": "positive", "topics": ["billing"], "better": "A", "helpfulness": 4, "ideal": "Thanks a lot, Jo!"}

    # The reviewer reads the answer in words: each span with the text it marks, shown as text.
    page.get_by_role("button", name="Log out").click()
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/review/")
    answer = page.get_by_test_id("review-item").locator("tr[data-annotator=anna] ul.answer")
    expect(answer).to_contain_text("pii: name: “Jo”; email: “<b>late</b>”")
    expect(answer).to_contain_text("topics: billing")
    expect(answer).to_contain_text("better: A is better")
    expect(answer.locator("b")).to_have_count(0)


def test_a_reviewer_corrects_an_answer_in_the_annotators_form(page, client, scientist, annotator, project,
                                                              review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, KEYBOARD_FIELDS))
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    assert submit(client, campaign, item["id"], {"sentiment": "positive", "better": "A"}).status_code == 201

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/review/")
    row = page.get_by_test_id("review-item").locator("tr[data-annotator=anna]")
    row.get_by_role("link", name="Correct…").click()
    expect(page.get_by_test_id("item-title")).to_have_text("Example 1 — correcting anna's answer")
    expect(page.get_by_label("[1] positive")).to_be_checked()  # her answer, to start from
    expect(page.get_by_test_id("skip")).to_be_hidden()
    page.keyboard.press("2")
    page.get_by_label("Comment").fill("The parcel was early: <i>still</i> negative in tone")
    page.keyboard.press("Control+Enter")

    expect(page).to_have_url(f"{page.url.split('/projects/')[0]}/projects/{project.pk}/campaigns/{campaign['id']}/review/")
    state = page.get_by_test_id("review-item").locator("tr[data-annotator=anna]").get_by_test_id("review-state")
    expect(state).to_contain_text("corrected: The parcel was early: <i>still</i> negative in tone")
    expect(state.get_by_test_id("corrected")).to_contain_text("sentiment: negative")
    corrected = Annotation.objects.get(annotator=annotator)
    assert corrected.review == "corrected" and corrected.reviewed_by == scientist
    assert corrected.reviewed_values == {"sentiment": "negative", "better": "A"}
    assert corrected.values == {"sentiment": "positive", "better": "A"}  # hers, kept


def test_a_manager_exports_the_agreed_answers_and_watches_the_export_end(
        page, client, scientist, annotator, second_annotator, project, review_version, celery_worker):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, schema=make_schema(client, project, KEYBOARD_FIELDS),
                             overlap=2, sample=3, seed=5)
    for user in (annotator, second_annotator):  # they agree on every example but the first they see
        client.force_login(user)
        while (response := next_item(client, campaign)).status_code == 200:
            item = response.json()
            label = "neutral" if user == annotator and item["position"] == 0 else "negative"
            assert submit(client, campaign, item["id"], {"sentiment": label, "better": "A"}).status_code == 201

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/")
    exports = page.get_by_test_id("exports")
    exports.get_by_label("Minimum agreement").fill("1")
    exports.get_by_label("New dataset name").fill("Agreed <reviews>")
    exports.get_by_role("button", name="Export").click()
    expect(page.get_by_text("Export queued")).to_be_visible()
    link = exports.get_by_role("link", name="Agreed <reviews> v1")
    expect(link).to_be_visible(timeout=60_000)  # the page follows the job and reloads when it ends
    expect(exports.get_by_test_id("export").first).to_contain_text("succeeded")
    link.click()
    expect(page.get_by_test_id("rows").locator("tbody tr")).to_have_count(2)  # the disputed example left out


def test_annotators_correct_the_models_suggestions_which_are_kept_beside_their_answers(
        page, scientist, annotator, project, review_version, demo_model, inference_worker):
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/new/")
    page.get_by_label("Name").fill("Fix the drafts")
    page.get_by_label("Annotation form").select_option(label="Correct the model's response (choose the model below)")
    page.get_by_label("Sample").fill("2")
    page.get_by_role("button", name="Create campaign").click()
    expect(page.locator(".field-error")).to_contain_text("choose the model")  # on the model's field
    page.get_by_label("Model suggestions").select_option(label=demo_model.name)
    page.get_by_role("button", name="Create campaign").click()
    expect(page.get_by_test_id("campaign-name")).to_have_text("Fix the drafts")
    campaign = Campaign.objects.get()
    assert LabelSchema.objects.count() == 1
    # The worker's progress reaches the open page (no reload).
    expect(page.get_by_test_id("suggestions")).to_have_text("suggestions: succeeded (2/2)", timeout=180_000)

    page.get_by_role("button", name="Log out").click()
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign.pk}/annotate/")
    expect(page.get_by_test_id("item-title")).to_have_text("Example 1 — pre-filled by the model: check it")
    first = Item.objects.get(campaign=campaign, position=0)  # fewest answers, then the earliest
    drafted = first.suggestion["values"]["ideal"]
    assert drafted.strip(), "the demo model wrote no draft"
    ideal = page.get_by_label("ideal")
    expect(ideal).to_have_value(drafted)
    ideal.press("End")
    ideal.type(" Checked by Anna.")
    expect(page.get_by_test_id("diff").locator("ins")).to_contain_text(["Checked"])
    page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("item-title")).to_contain_text("Example 2")
    answer_kept = Annotation.objects.get(annotator=annotator, item=first)
    assert answer_kept.values == {"ideal": drafted + " Checked by Anna."}
    assert answer_kept.suggestion == first.suggestion  # what the model proposed, beside the answer


def test_a_manager_stops_the_model_suggestions_from_the_campaign_page(page, client, scientist, project,
                                                                      review_version, tiny_model):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    # Suggestions from a model, waiting for a worker (none runs here, so the stop comes first).
    Campaign.objects.filter(pk=campaign["id"]).update(suggestion_model=tiny_model)
    SuggestionRun.objects.create(campaign_id=campaign["id"])
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/")
    expect(page.get_by_test_id("suggestions")).to_have_text("suggestions: queued")
    page.get_by_role("button", name="Stop suggestions").click()
    expect(page.get_by_text("Model suggestions stopped")).to_be_visible()
    expect(page.get_by_test_id("suggestions")).to_have_text("suggestions: cancelled")
    expect(page.get_by_role("button", name="Stop suggestions")).to_have_count(0)


def test_closing_a_campaign_asks_first_and_declining_leaves_it_open(page, client, scientist, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign['id']}/")
    asked = []

    def decline(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", decline)
    page.get_by_role("button", name="Close campaign").click()
    expect(page.get_by_role("button", name="Close campaign")).to_be_visible()
    assert asked == ["Close this campaign? Annotators can no longer submit to it."]
    assert Campaign.objects.get(pk=campaign["id"]).state == "active"

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Close campaign").click()
    expect(page.get_by_role("button", name="Close campaign")).to_have_count(0)
    assert Campaign.objects.get(pk=campaign["id"]).state == "closed"


def test_a_manager_picks_a_classifier_and_annotators_get_its_least_confident_suggestions_first(
        page, scientist, owner, annotator, project, tiny_model, inference_worker, tmp_path):
    from tests.annotation.classifier import trained_classifier
    from tests.training.test_classify_jobs import labelled_version

    classifier = trained_classifier(project, owner, tiny_model, tmp_path / "classifier")
    texts = ["paris", "france", "what is the capital of paris ?", "paris france", "of the capital france is what"]
    labelled_version(project, owner, [(text, "city") for text in texts])
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/campaigns/new/")
    page.get_by_label("Name").fill("Topics, unsure first")
    page.get_by_label("Annotation form").select_option(label="Classify")
    editor = page.get_by_test_id("label-editor")
    for label in ("city", "planet"):
        editor.get_by_role("textbox", name="New label").fill(label)
        editor.get_by_role("button", name="Add label").click()
    page.get_by_label("Model suggestions").select_option(label=f"{classifier.name} (classifier: city, country)")
    page.get_by_label("Item order").select_option(label="Least confident suggestions first")
    page.get_by_role("button", name="Create campaign").click()
    # On the model's field, naming the labels that differ; nothing is left behind.
    expect(page.locator(".field-error")).to_contain_text("the classifier has 'country', which 'label' lacks")
    expect(page.locator(".field-error")).to_contain_text("'label' has 'planet', which the classifier lacks")
    assert not Campaign.objects.exists() and not LabelSchema.objects.exists()
    editor.get_by_role("button", name="Remove planet").click()
    editor.get_by_role("textbox", name="New label").fill("country")
    editor.get_by_role("button", name="Add label").click()
    page.get_by_role("button", name="Create campaign").click()
    expect(page.get_by_test_id("campaign-name")).to_have_text("Topics, unsure first")
    expect(page.get_by_test_id("order")).to_have_text("least confident suggestions first")
    expect(page.get_by_test_id("suggestions")).to_have_text("suggestions: succeeded (5/5)", timeout=120_000)
    campaign = Campaign.objects.get()
    assert campaign.order == "uncertain_first" and campaign.suggestion_model_id == classifier.pk
    least_confident_first = list(Item.objects.filter(campaign=campaign).order_by("confidence", "position"))
    assert [item.position for item in least_confident_first] != list(range(5))  # not the default order

    page.get_by_role("button", name="Log out").click()
    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/campaigns/{campaign.pk}/annotate/")
    for item in least_confident_first:
        label, confidence = item.suggestion["values"]["label"], item.suggestion["confidence"]
        expect(page.get_by_test_id("item-title")).to_have_text(
            f"Example {item.position + 1} — pre-filled by the model: check it")
        expect(page.locator(f"input[name=label][value={label}]")).to_be_checked()
        expect(page.get_by_test_id("suggestion-label")).to_have_text(
            f"Model suggests “{label}” ({int(confidence * 100 + 0.5)}% confident)")
        page.keyboard.press("Control+Enter")  # the suggestion, accepted as it is
    expect(page.get_by_test_id("done")).to_be_visible()
    answers = Annotation.objects.filter(annotator=annotator).order_by("created_at", "id")
    assert [a.item_id for a in answers] == [item.pk for item in least_confident_first]
    assert [a.values["label"] for a in answers] == [item.suggestion["values"]["label"] for item in least_confident_first]
