"""Comparisons made directly in the database (no worker), for tests of what surrounds a run:
voting, leaderboards, exports, pages, permissions."""

import uuid

from apps.comparison.models import Comparison, Contestant, Output, Prompt
from apps.registry.models import RegisteredModel

PROMPTS = ["what is the capital of france ?", "what is paris ?", "is paris the capital of france ?"]


def placeholder_model(project, name: str | None = None) -> RegisteredModel:
    return RegisteredModel.objects.create(project=project, name=name or f"Model {uuid.uuid4().hex[:6]}",
                                          format="hf_dir", source_path="/nonexistent", weights_path="/nonexistent",
                                          status="ready", info={})


def make_comparison(project, owner, *, models: int | list = 2, prompts=PROMPTS, state="succeeded",
                    outputs: bool = True, references=None, name="Base vs tuned", answer=None) -> Comparison:
    """A comparison whose grid is already filled: output text "<model name> says <n>", or
    `answer(prompt, contestant)`."""
    if isinstance(models, int):
        models = [placeholder_model(project) for _ in range(models)]
    comparison = Comparison.objects.create(project=project, name=name, state=state, created_by=owner,
                                           params={"max_new_tokens": 8}, source={"kind": "ad_hoc"},
                                           cells_total=len(prompts) * len(models))
    contestants = [Contestant.objects.create(comparison=comparison, model=m, position=i) for i, m in enumerate(models)]
    rows = [Prompt.objects.create(comparison=comparison, position=i, text=text,
                                  reference=references[i] if references else None) for i, text in enumerate(prompts)]
    if outputs:
        Output.objects.bulk_create([Output(comparison=comparison, prompt=p, contestant=c,
                                           text=answer(p, c) if answer else f"{c.model.name} says {p.position}",
                                           completion_tokens=3, latency_s=0.1, tokens_per_s=30.0)
                                    for p in rows for c in contestants])
        comparison.cells_done = len(rows) * len(contestants)
        comparison.save(update_fields=["cells_done"])
    return comparison
