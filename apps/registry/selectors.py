"""Reads of the model registry."""

from pathlib import Path

from django.conf import settings

MAX_ROOT_ENTRIES = 200


def model_root_entries() -> list[str]:
    """What can be registered by name from the model roots: their top-level .gguf files and
    directories holding a config.json (a name is resolved inside the roots, in order)."""
    found: list[str] = []
    for root in settings.MODEL_ROOTS:
        try:
            entries = sorted(Path(root).iterdir())
        except OSError:
            continue
        for entry in entries:
            if (entry.is_file() and entry.suffix == ".gguf") or (entry.is_dir() and (entry / "config.json").is_file()):
                if entry.name not in found:
                    found.append(entry.name)
            if len(found) >= MAX_ROOT_ENTRIES:
                return found
    return found
