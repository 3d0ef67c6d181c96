"""What travels with an adapter: its model card (README.md) and workbench_train_config.json.

PEFT's save_pretrained leaves an empty template card. Whoever downloads an adapter needs to know
what it is on top of and what made it: the base model's name and content hash (a hash of its
weight files, so the right base can be checked, not just a path on our server), the dataset
version and its content hash, the job, the full config and the final metrics.

    lineage = {"base_model": {"name": ..., "content_hash": ...},
               "dataset": {"name": ..., "version": 3, "content_hash": ...},
               "job": {"id": 12, "name": ...}, "train_split": "train", "eval_split": "validation"}

Every key is optional: the engine run on its own (tests, scripts) has no job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_FILE = "workbench_train_config.json"
CARD_FILE = "README.md"


def train_config_document(config: dict, lineage: dict | None, metrics: dict | None) -> dict:
    """The content of workbench_train_config.json: the config (TrainConfig.from_dict reads
    `config` back), the lineage and the final metrics."""
    return {"config": config, **(lineage or {}), "metrics": metrics or {}}


def write_adapter_files(adapter_dir: Path, *, config: dict, lineage: dict | None, metrics: dict | None,
                        adapter_config: dict | None = None) -> None:
    """Write workbench_train_config.json and README.md (replacing PEFT's template) into adapter_dir."""
    adapter_dir = Path(adapter_dir)
    document = train_config_document(config, lineage, metrics)
    (adapter_dir / CONFIG_FILE).write_text(json.dumps(document, indent=2, default=str))
    if adapter_config is None and (adapter_dir / "adapter_config.json").is_file():
        adapter_config = json.loads((adapter_dir / "adapter_config.json").read_text())
    (adapter_dir / CARD_FILE).write_text(model_card(config=config, lineage=lineage or {}, metrics=metrics or {},
                                                    adapter_config=adapter_config or {}))


def model_card(*, config: dict, lineage: dict, metrics: dict, adapter_config: dict) -> str:
    base = lineage.get("base_model") or {}
    dataset = lineage.get("dataset") or {}
    job = lineage.get("job") or {}
    targets = adapter_config.get("target_modules") or config.get("target_modules")
    if isinstance(targets, (list, set, tuple)):
        targets = ", ".join(sorted(targets))
    # JSON strings are valid YAML double-quoted scalars: names with colons or quotes stay intact.
    front = ["---", "library_name: peft", "tags:", "- lora", "- workbench"]
    if base.get("name"):
        front.append(f"base_model: {json.dumps(base['name'])}")
    front.append("---")
    title = job.get("name") or "LoRA adapter"
    lines = [*front, "", f"# {title}", "",
             f"A LoRA adapter ({str(config.get('method', 'sft')).upper()}) trained with Workbench"
             + (f", job #{job['id']}" if job.get("id") else "") + ".", "", "## Lineage", "",
             "| | |", "| --- | --- |",
             f"| base model | {_cell(base.get('name', 'unknown'))} |",
             f"| base model content hash | `{base.get('content_hash') or 'unknown'}` (sha256 of its weight files) |"]
    if dataset:
        lines += [f"| dataset | {_cell(dataset.get('name', '?'))}, version {dataset.get('version', '?')} |",
                  f"| dataset version content hash | `{dataset.get('content_hash', '?')}` |"]
    if "train_split" in lineage:
        lines.append(f"| splits | train: {lineage.get('train_split') or 'all rows'}, "
                     f"eval: {lineage.get('eval_split') or 'none'} |")
    if job.get("id"):
        lines.append(f"| job | #{job['id']} {_cell(job.get('name', ''))} |")
    lines += ["", "## Adapter", "", "| | |", "| --- | --- |",
              f"| type | PEFT {adapter_config.get('peft_type', 'LORA')} |",
              f"| rank (r) | {adapter_config.get('r', config.get('lora_r'))} |",
              f"| alpha | {adapter_config.get('lora_alpha', config.get('lora_alpha'))} |",
              f"| target modules | {_cell(str(targets))} |",
              "", "## Final metrics", "", "| metric | value |", "| --- | --- |",
              *[f"| {key} | {_number(value)} |" for key, value in sorted(metrics.items())],
              "", "## Training config", "", "```json", json.dumps(config, indent=2, sort_keys=True), "```", "",
              "## Use", "", "```python", "from peft import PeftModel",
              "from transformers import AutoModelForCausalLM", "",
              "base = AutoModelForCausalLM.from_pretrained(\"<the base model directory>\")",
              "model = PeftModel.from_pretrained(base, \"<this folder>\")", "```", "",
              "Check the base: its content hash is the sha256 of, for each weight file in order, "
              "`<file name>\\0<sha256 of the file>\\n`.", ""]
    return "\n".join(lines)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else _cell(value)
