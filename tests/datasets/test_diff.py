"""The version diff as pages: counts of every kind of change, the first few of each, and each
kind paged with a cursor; counts kept once computed, and every row read through an index."""


import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.datasets import selectors
from apps.datasets.models import Dataset
from apps.datasets.writer import write_version

pytestmark = pytest.mark.django_db

ROLES = {"id": "id", "prompt": "prompt", "response": "response"}
SPLITS = ("train", "test")
ROWS = 300


def _records(changed=(), removed=(), added=0):
    """Rows r0..r{ROWS-1}; `changed` ids get another response, `removed` ones are left out, and
    `added` new rows come last."""
    rows = [{"id": f"r{i}", "prompt": f"question {i}", "response": f"answer {i}" + (" (fixed)" if i in changed else "")}
            for i in range(ROWS) if i not in removed]
    return rows + [{"id": f"n{i}", "prompt": f"new question {i}", "response": "new"} for i in range(added)]


@pytest.fixture
def versions(project, owner):
    """v1 and v2: 60 rows changed, 25 removed, 55 added and 70 moved to the other split."""
    dataset = Dataset.objects.create(project=project, name="Paged", created_by=owner)
    changed, removed, moved = set(range(0, 120, 2)), set(range(1, 51, 2)), set(range(151, 291, 2))
    old_rows = _records()
    old = write_version(dataset=dataset, author=owner, roles=ROLES, records=old_rows,
                        splits=[SPLITS[i % 2] for i in range(ROWS)])
    new_rows = _records(changed=changed, removed=removed, added=55)
    split_of = {row["id"]: SPLITS[int(row["id"][1:]) % 2] if row["id"][0] == "r" else "train" for row in new_rows}
    for i in moved:
        split_of[f"r{i}"] = SPLITS[(i + 1) % 2]
    new = write_version(dataset=dataset, author=owner, roles=ROLES, records=new_rows, parent=old,
                        splits=[split_of[row["id"]] for row in new_rows])
    return dataset, old, new, {"changed": {f"r{i}" for i in changed}, "removed": {f"r{i}" for i in removed},
                               "added": {f"n{i}" for i in range(55)}, "moved": {f"r{i}" for i in moved}}


def _ids(kind, items):
    if kind == "changed":
        return [item["id"] for item in items]
    if kind == "moved":
        return [item["row"].ext_id for item in items]
    return [row.ext_id for row in items]


def _positions(kind, items):
    rows = {"changed": lambda i: i["after"], "moved": lambda i: i["row"]}.get(kind, lambda i: i)
    return [rows(item).position for item in items]


def test_counts_and_the_first_of_each_kind(client, scientist, versions):
    dataset, old, new, expected = versions
    client.force_login(scientist)
    page = client.get(f"/projects/{dataset.project_id}/datasets/{dataset.pk}/diff/",
                      {"old": old.number, "new": new.number})
    assert page.status_code == 200
    diff = page.context["diff"]
    assert {kind: diff[kind] for kind in selectors.DIFF_KINDS} == {kind: len(ids) for kind, ids in expected.items()}
    for kind in selectors.DIFF_KINDS:
        examples = diff[f"{kind}_examples"]
        assert len(examples) == selectors.DIFF_EXAMPLES
        assert set(_ids(kind, examples)) <= expected[kind]
        assert _positions(kind, examples) == sorted(_positions(kind, examples))
    change = diff["changed_examples"][0]
    assert (change["id"], change["before"].response, change["after"].response) == ("r0", "answer 0", "answer 0 (fixed)")
    move = diff["moved_examples"][0]
    assert (move["row"].ext_id, move["before"], move["after"]) == ("r151", "test", "train")
    html = page.content.decode()
    for kind in selectors.DIFF_KINDS:  # each kind links to all of its rows
        assert f'href="?old={old.number}&new={new.number}&show={kind}"' in html
    assert "<title>Diff · Paged · Workbench</title>" in html


@pytest.mark.parametrize("kind", selectors.DIFF_KINDS)
def test_each_kind_is_paged_in_order_with_a_cursor_until_every_row_is_seen(client, scientist, versions, kind):
    dataset, old, new, expected = versions
    client.force_login(scientist)
    url = f"/projects/{dataset.project_id}/datasets/{dataset.pk}/diff/"
    seen, positions, after, pages = [], [], None, 0
    while True:
        params = {"old": old.number, "new": new.number, "show": kind, **({"after": after} if after is not None else {})}
        page = client.get(url, params)
        assert page.status_code == 200
        diff = page.context["diff"]
        assert len(diff["items"]) <= selectors.DIFF_PAGE_ROWS and diff[kind] == len(expected[kind])
        seen += _ids(kind, diff["items"])
        positions += _positions(kind, diff["items"])
        pages += 1
        html = page.content.decode()
        if diff["next_after"] is None:
            assert "Next page" not in html
            break
        assert len(diff["items"]) == selectors.DIFF_PAGE_ROWS
        assert f"&show={kind}&after={diff['next_after']}" in html  # the link to the next page
        after = diff["next_after"]
    assert pages == -(-len(expected[kind]) // selectors.DIFF_PAGE_ROWS)
    assert len(seen) == len(set(seen)) and set(seen) == expected[kind]  # each once, none left out
    assert positions == sorted(positions)


def test_a_cursor_that_is_no_position_and_an_unknown_kind_fall_back(client, scientist, versions):
    dataset, old, new, expected = versions
    client.force_login(scientist)
    url = f"/projects/{dataset.project_id}/datasets/{dataset.pk}/diff/"
    first = client.get(url, {"old": old.number, "new": new.number, "show": "added", "after": "x"}).context["diff"]
    assert first["after"] is None and _ids("added", first["items"])[0] == "n0"
    past = client.get(url, {"old": old.number, "new": new.number, "show": "added", "after": str(2**70)})
    assert past.status_code == 200 and past.context["diff"]["items"] == []
    overview = client.get(url, {"old": old.number, "new": new.number, "show": "everything"}).context["diff"]
    assert "items" not in overview and len(overview["added_examples"]) == selectors.DIFF_EXAMPLES


def test_rows_without_ids_are_added_and_removed_never_changed(project, owner):
    dataset = Dataset.objects.create(project=project, name="No ids", created_by=owner)
    old = write_version(dataset=dataset, author=owner, roles={"prompt": "prompt"},
                        records=[{"prompt": f"q{i}"} for i in range(5)])
    new = write_version(dataset=dataset, author=owner, roles={"prompt": "prompt"}, parent=old,
                        records=[{"prompt": f"q{i}"} for i in range(3)] + [{"prompt": "q3, fixed"}])
    diff = selectors.version_diff(old=old, new=new)
    assert (diff["added"], diff["removed"], diff["changed"], diff["moved"]) == (1, 2, 0, 0)
    assert [row.prompt for row in diff["added_examples"]] == ["q3, fixed"]
    assert [row.prompt for row in diff["removed_examples"]] == ["q3", "q4"]


def test_counts_are_computed_once_for_a_pair_of_versions(versions):
    _, old, new, _ = versions
    with CaptureQueriesContext(connection) as first:
        selectors.version_diff(old=old, new=new)
    with CaptureQueriesContext(connection) as again:
        selectors.version_diff_page(old=old, new=new, kind="changed", after=50)
    counting = [q["sql"] for q in first.captured_queries if "COUNT(" in q["sql"]]
    assert len(counting) == 4  # only in new, only in old, moved, changed
    assert not [q["sql"] for q in again.captured_queries if "COUNT(" in q["sql"]]
    assert len(again.captured_queries) == 2  # the page, and the old side of its changed rows


def _plan(sql: str) -> list[tuple[str, str]]:
    """(step, the step it runs inside) of the plan of `sql` as it ran (the captured SQL has its
    parameters inlined)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Whatever the table's size: a sequential scan is then only taken where no index serves.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql)
            return [(row[0], "") for row in cursor.fetchall()]
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        rows = cursor.fetchall()
    detail = {row[0]: row[3] for row in rows}
    return [(row[3], detail.get(row[1], "")) for row in rows]


def test_every_diff_query_reads_the_rows_through_an_index(versions):
    """No query reads a version's rows without an index, and no probe of the other version, made
    once per row, reads more than the rows with that hash or id."""
    _, old, new, _ = versions
    with CaptureQueriesContext(connection) as queries:
        selectors.version_diff(old=old, new=new)
        for kind in selectors.DIFF_KINDS:
            selectors.version_diff_page(old=old, new=new, kind=kind, after=100)
    row_queries = [q["sql"] for q in queries.captured_queries if "datasets_datasetrow" in q["sql"]]
    assert len(row_queries) >= 10
    for sql in row_queries:
        plan = _plan(sql)
        if connection.vendor == "postgresql":
            assert not any("Seq Scan on datasets_datasetrow" in step for step, _ in plan), (sql, plan)
            continue
        for step, inside in plan:
            assert not step.startswith("SCAN"), (sql, plan)  # a whole table or index
            if inside.startswith("CORRELATED"):
                assert not step.endswith("(version_id=?)"), (sql, plan)  # the other version, whole, per row
