"""The statements behind "next item" and "submit", written out.

Fifty annotators at once call these two requests and little else. Built through the ORM, each
statement cost more CPU in the web process (query compilation: about 9 ms of Python a request)
than PostgreSQL spent running it, and the web processes were what saturated the machine
(bench/README.md, annotate_concurrent). The SQL here is what the ORM generated, written once: the
same joins and index plans (EXPLAIN in the bench's JSON), the same rows. It runs on PostgreSQL and
SQLite alike, with row locks (FOR UPDATE ... SKIP LOCKED) where the database has them; rows come
back as model instances through apps.core.sql, converted as the ORM converts them.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import connection

from apps.annotation.models import Annotation, Campaign, Draft, Item, LabelSchema, Lease
from apps.core.sql import columns, execute, rows
from apps.datasets.models import DatasetRow
from apps.projects.models import Project

ITEM, ROW, LEASE = Item._meta.db_table, DatasetRow._meta.db_table, Lease._meta.db_table
ANNOTATION, DRAFT = Annotation._meta.db_table, Draft._meta.db_table


def _when(value: datetime):
    return connection.ops.adapt_datetimefield_value(value)


def _locking(clause: str) -> str:
    return f" {clause}" if connection.features.has_select_for_update_skip_locked else ""


# Items the annotator has not answered (a = their annotation, i = the item).
NOT_DONE_BY = f"NOT EXISTS (SELECT 1 FROM {ANNOTATION} a WHERE a.annotator_id = %s AND a.item_id = i.id)"


def _item(joins: str, where: str, params: list, tail: str = "") -> Item | None:
    """The first item `i` the statement finds, with its row `r` loaded."""
    sql = (f"SELECT {columns(Item, 'i')}, {columns(DatasetRow, 'r')} FROM {ITEM} i {joins}"
           f" INNER JOIN {ROW} r ON r.id = i.row_id WHERE {where} {tail}")
    found = rows(sql, params, Item, DatasetRow)
    if not found:
        return None
    item, item.row = found[0]
    return item


def _id(value) -> int | None:
    """An id given by a client, or None when it names no row (not a whole number, or past 64 bits)."""
    try:
        value = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if 0 < value < 2**63 else None


def campaign(campaign_id) -> Campaign | None:
    """The campaign with its project and label schema (what every annotating request checks and uses)."""
    if (campaign_id := _id(campaign_id)) is None:
        return None
    sql = (f"SELECT {columns(Campaign, 'c')}, {columns(Project, 'p')}, {columns(LabelSchema, 's')}"
           f" FROM {Campaign._meta.db_table} c INNER JOIN {Project._meta.db_table} p ON p.id = c.project_id"
           f" INNER JOIN {LabelSchema._meta.db_table} s ON s.id = c.schema_id WHERE c.id = %s")
    found = rows(sql, [campaign_id], Campaign, Project, LabelSchema)
    if not found:
        return None
    loaded, loaded.project, loaded.schema = found[0]
    return loaded


def item(campaign_id: int, item_id) -> Item | None:
    if (item_id := _id(item_id)) is None:
        return None
    return _item("", "i.campaign_id = %s AND i.id = %s", [campaign_id, item_id])


def held_item(campaign_id: int, user_id: int, now: datetime) -> Item | None:
    """The first item this annotator holds a live lease on and has not answered (read from their
    leases: a few rows, whatever the campaign's size)."""
    return _item(f"INNER JOIN {LEASE} l ON l.item_id = i.id",
                 f"i.campaign_id = %s AND l.annotator_id = %s AND l.expires_at > %s AND {NOT_DONE_BY}",
                 [campaign_id, user_id, _when(now), user_id], "ORDER BY i.position LIMIT 1")


def candidate(campaign_id: int, overlap: int, user_id: int, now: datetime, passed: list[int], *,
              uncertain_first: bool = False) -> Item | None:
    """The item with the fewest completed annotations (then the earliest) that this annotator has
    not done and that is not leased to enough others, locked (skipping items locked by others):
    an index scan of (campaign, completed, position) that stops at the first that qualifies.
    `uncertain_first`: the least confident suggestion first among those with as few answers, items
    without one after them in order (the index of (campaign, completed, confidence, position);
    PostgreSQL keeps NULLs last in an ascending index, and SQLite sorts them as told)."""
    skip = f" AND i.id NOT IN ({', '.join(['%s'] * len(passed))})" if passed else ""
    leased_to_others = (f"SELECT COUNT(*) FROM {LEASE} l WHERE l.item_id = i.id AND l.expires_at > %s"
                        " AND l.annotator_id <> %s")
    return _item("", f"i.campaign_id = %s AND i.completed < %s AND {NOT_DONE_BY}"
                     f" AND i.completed + ({leased_to_others}) < %s{skip}",
                 [campaign_id, overlap, user_id, _when(now), user_id, overlap, *passed],
                 f"ORDER BY i.completed, {'i.confidence NULLS LAST, ' if uncertain_first else ''}i.position LIMIT 1"
                 + _locking("FOR UPDATE OF i SKIP LOCKED"))


def leased_to_others(item_id: int, user_id: int, now: datetime) -> int:
    with execute(f"SELECT COUNT(*) FROM {LEASE} WHERE item_id = %s AND expires_at > %s AND annotator_id <> %s",
                  [item_id, _when(now), user_id]) as cursor:
        return cursor.fetchone()[0]


def lease(item_id: int, user_id: int, expires: datetime) -> None:
    """Lease (or lease again) the item to the annotator until `expires`."""
    execute(f"INSERT INTO {LEASE} (item_id, annotator_id, expires_at) VALUES (%s, %s, %s)"
             " ON CONFLICT (item_id, annotator_id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
             [item_id, user_id, _when(expires)]).close()


def answered_with(user_id: int, client_id: uuid.UUID) -> int | None:
    """The item that this annotator's submission `client_id` answered, if it was recorded."""
    prepared = Annotation._meta.get_field("client_id").get_db_prep_value(client_id, connection)
    with execute(f"SELECT item_id FROM {ANNOTATION} WHERE annotator_id = %s AND client_id = %s",
                  [user_id, prepared]) as cursor:
        found = cursor.fetchone()
    return found[0] if found else None


def lock_item(item_id: int) -> int:
    """Lock the item's row until the transaction ends; returns its completed count."""
    with execute(f"SELECT completed FROM {ITEM} WHERE id = %s" + _locking("FOR UPDATE"), [item_id]) as cursor:
        return cursor.fetchone()[0]


def previous_answer(item_id: int, user_id: int) -> tuple[int, bool] | None:
    """(id, skipped) of this annotator's answer to the item, if there is one."""
    with execute(f"SELECT id, skipped FROM {ANNOTATION} WHERE item_id = %s AND annotator_id = %s",
                  [item_id, user_id]) as cursor:
        found = cursor.fetchone()
    return (found[0], bool(found[1])) if found else None


def count_answer(item_id: int) -> None:
    execute(f"UPDATE {ITEM} SET completed = completed + 1 WHERE id = %s", [item_id]).close()


def release(item_id: int, user_id: int) -> None:
    """The annotator is done with the item: their lease and draft go."""
    for table in (LEASE, DRAFT):
        execute(f"DELETE FROM {table} WHERE item_id = %s AND annotator_id = %s", [item_id, user_id]).close()


def draft(item_id: int, user_id: int) -> Draft | None:
    found = rows(f"SELECT {columns(Draft, 'd')} FROM {DRAFT} d WHERE d.item_id = %s AND d.annotator_id = %s",
                 [item_id, user_id], Draft)
    return found[0][0] if found else None


def my_counts(campaign_id: int, user_id: int) -> dict:
    """This annotator's submitted and skipped answers in the campaign."""
    with execute(f"SELECT COUNT(*) FILTER (WHERE NOT a.skipped), COUNT(*) FILTER (WHERE a.skipped)"
                  f" FROM {ANNOTATION} a INNER JOIN {ITEM} i ON i.id = a.item_id"
                  " WHERE a.annotator_id = %s AND i.campaign_id = %s", [user_id, campaign_id]) as cursor:
        mine, skipped = cursor.fetchone()
    return {"mine": mine, "my_skipped": skipped}
