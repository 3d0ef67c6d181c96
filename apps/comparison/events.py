"""Live updates of one comparison, published to `comparison.<id>`: its state and its cells."""

from apps.projects.events import send


def comparison_group(comparison_id: int) -> str:
    return f"comparison.{comparison_id}"


def state_payload(comparison) -> dict:
    return {"id": comparison.pk, "state": comparison.state, "cells_done": comparison.cells_done,
            "cells_total": comparison.cells_total, "error": comparison.error,
            "cancel_requested": comparison.cancel_requested}


def comparison_state(comparison) -> None:
    send(comparison_group(comparison.pk), {"type": "comparison.state", "comparison": state_payload(comparison)})


def cells(comparison_id: int, payloads: list[dict], summaries: list[dict]) -> None:
    """New cells, with every model's summary recomputed over all cells (the page shows these
    numbers as they are; it computes none of its own)."""
    send(comparison_group(comparison_id), {"type": "comparison.cells", "cells": payloads, "summaries": summaries})
