"""Checkpoints: output_dir/checkpoints/step-<N>/, written atomically, the last KEEP kept.

A checkpoint holds everything a resumed run needs to continue exactly where it stopped:

    adapter/            the LoRA adapter (PEFT save_pretrained: adapter_config.json, adapter_model.safetensors)
    optimizer.pt        AdamW state          } torch.save; read back with torch.load(weights_only=True):
    scheduler.pt        LR scheduler state   } only tensors and plain containers, never arbitrary objects
    rng.pt              python / torch / cuda RNG states
    trainer_state.json  TrainerState (step, epoch, position in the epoch, counters)
    COMPLETE            written last: a directory without it is ignored

It is written into a temporary directory beside the final one, every file fsynced, then renamed
into place, so a worker killed mid-write leaves either the previous checkpoints or a temporary
directory that is ignored (and removed by the next run). These files are written by the server
and read only from the job's own output directory. A checkpoint written on another machine (kept in
object storage by the caller) is put back with install_checkpoint, under the same guarantees.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.durable import fsync_directory, fsync_tree

KEEP = 2
CHECKPOINTS = "checkpoints"
COMPLETE = "COMPLETE"
STATE_FILE = "trainer_state.json"
_PREFIX = "step-"
_TEMP_PREFIX = ".tmp-"


@dataclass
class TrainerState:
    """Where the run is. `batch_in_epoch` counts the optimizer steps already taken in `epoch`."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    tokens_seen: int = 0                   # non-padding tokens trained on
    train_loss: float | None = None        # smoothed (EMA) training loss
    eval_loss: float | None = None         # the latest evaluation's
    best_eval_loss: float | None = None
    best_eval_score: float | None = None   # the best of what early stopping watches, lower is better
    eval_scores: dict = dataclasses.field(default_factory=dict)  # the latest evaluation's method metrics (numbers)
    evals_without_improvement: int = 0     # the early-stopping patience counter
    last_eval_step: int | None = None
    stopped_early: bool = False
    elapsed_s: float = 0.0                 # training time over all runs of the job

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainerState:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def checkpoints_dir_of(output_dir: Path) -> Path:
    """Where a run writing to output_dir keeps its checkpoints."""
    return output_dir / CHECKPOINTS


def complete_steps(checkpoints_dir: Path, up_to: int | None = None) -> list[int]:
    """The steps of the complete checkpoints (at most `up_to`, if given), oldest first."""
    return [step for step, _ in _complete(checkpoints_dir, up_to)]


def latest_checkpoint(checkpoints_dir: Path, up_to: int | None = None) -> Path | None:
    """The complete checkpoint with the highest step (at most `up_to`, if given), or None."""
    complete = _complete(checkpoints_dir, up_to)
    return complete[-1][1] if complete else None


def save_checkpoint(checkpoints_dir: Path, *, model: Any, optimizer: Any, scheduler: Any,
                    state: TrainerState) -> Path:
    """Write checkpoints_dir/step-<state.step> atomically and prune to the last KEEP. Returns its path.
    An existing complete checkpoint of the same step is kept as it is."""
    import torch

    final = checkpoints_dir / f"{_PREFIX}{state.step}"
    if (final / COMPLETE).exists():
        return final
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{_PREFIX}{state.step}-", dir=checkpoints_dir))
    try:
        model.save_pretrained(work / "adapter")
        torch.save(optimizer.state_dict(), work / "optimizer.pt")
        torch.save(scheduler.state_dict(), work / "scheduler.pt")
        torch.save(_rng_state(), work / "rng.pt")
        (work / STATE_FILE).write_text(json.dumps(dataclasses.asdict(state), indent=2))
        (work / COMPLETE).write_text("")
        _publish(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _prune(checkpoints_dir)
    return final


def install_checkpoint(checkpoints_dir: Path, step: int, fill: Callable[[Path], None]) -> Path:
    """Put a checkpoint written elsewhere (on another machine, read back from object storage) in place
    as checkpoints_dir/step-<step>, as atomically as save_checkpoint: `fill(directory)` writes its files
    into a temporary directory, renamed into place only once `fill` returned and the files are a
    complete checkpoint of that step (else ValueError; nothing is left either way). An existing
    complete checkpoint of the step is kept as it is. Prunes to the last KEEP. Returns its path."""
    final = checkpoints_dir / f"{_PREFIX}{step}"
    if (final / COMPLETE).exists():
        return final
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{_PREFIX}{step}-", dir=checkpoints_dir))
    try:
        fill(work)
        if not (work / COMPLETE).is_file() or not (work / STATE_FILE).is_file():
            raise ValueError(f"The files given for the checkpoint at step {step} are not a complete checkpoint.")
        state = json.loads((work / STATE_FILE).read_text())
        if not isinstance(state, dict) or state.get("step") != step:
            raise ValueError(f"The files given for the checkpoint at step {step} are another step's.")
        _publish(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _prune(checkpoints_dir)
    return final


def _publish(work: Path, final: Path) -> None:
    fsync_tree(work)
    if final.exists():  # an incomplete directory of this step, from a crash during an older rename
        shutil.rmtree(final)
    os.rename(work, final)
    fsync_directory(final.parent)


def _prune(checkpoints_dir: Path) -> None:
    for _, old in _complete(checkpoints_dir)[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(path: Path, *, model: Any, optimizer: Any, scheduler: Any, device: Any) -> TrainerState:
    """Restore the adapter weights, optimizer, scheduler and RNG states from a checkpoint written by
    save_checkpoint, and return its TrainerState."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = load_file(path / "adapter" / "adapter_model.safetensors", device=str(device))
    result = set_peft_model_state_dict(model, weights)
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"The checkpoint {path.name} does not fit this model's adapter.")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device, weights_only=True))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))
    _set_rng_state(torch.load(path / "rng.pt", weights_only=True))
    return TrainerState.from_dict(json.loads((path / STATE_FILE).read_text()))


def remove_incomplete(checkpoints_dir: Path) -> None:
    """Delete temporary directories left by a run killed while writing a checkpoint, and step
    directories without COMPLETE. One job owns its output directory, so no other writer can be
    using them."""
    if checkpoints_dir.is_dir():
        for entry in checkpoints_dir.iterdir():
            if entry.is_dir() and (entry.name.startswith(_TEMP_PREFIX)
                                   or (entry.name.startswith(_PREFIX) and not (entry / COMPLETE).is_file())):
                shutil.rmtree(entry, ignore_errors=True)


def discard_after(checkpoints_dir: Path, step: int) -> list[int]:
    """Remove the complete checkpoints above `step`, the newest one the caller vouches for (a worker that
    lost its job may have written one after that, which the job never recorded); returns their steps.
    Each is renamed aside first, so a removal cut short leaves a temporary directory, never a
    checkpoint with files missing."""
    discarded = []
    for number, path in _complete(checkpoints_dir):
        if number > step:
            aside = path.with_name(f"{_TEMP_PREFIX}discarded-{path.name}")
            os.rename(path, aside)
            shutil.rmtree(aside, ignore_errors=True)
            discarded.append(number)
    if discarded:
        fsync_directory(checkpoints_dir)
    return discarded


def _complete(checkpoints_dir: Path, up_to: int | None = None) -> list[tuple[int, Path]]:
    if not checkpoints_dir.is_dir():
        return []
    found = []
    for entry in checkpoints_dir.iterdir():
        number = entry.name[len(_PREFIX):]
        if (entry.name.startswith(_PREFIX) and number.isdigit() and (up_to is None or int(number) <= up_to)
                and (entry / COMPLETE).is_file()):
            found.append((int(number), entry))
    return sorted(found)


def _rng_state() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


