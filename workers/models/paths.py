"""Where a model may be read from: only below the configured model roots, symlinks resolved.

The check is on `os.path.realpath`, so `..`, `//`, symlinked directories and symlinked files
all reduce to the one real location before it is compared with the (also resolved) roots
(the path traversals of MLflow CVE-2023-1177, -6977, -3848). Nothing is URL-parsed: `#` and `?` are
ordinary file-name characters here, and a string that looks like a URL is refused outright,
because the server never fetches a user-supplied URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from .errors import ModelSafetyError

# System trees never read as models, even below a root configured carelessly (say "/").
BLOCKED_TREES = (Path("/proc"), Path("/sys"), Path("/dev"), Path("/etc"), Path("/boot"), Path("/run"))

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://|file:)", re.IGNORECASE)


def is_within(path: Path, root: Path) -> bool:
    """Whether `path` is `root` or below it. Both must already be resolved (realpath)."""
    return path == root or root in path.parents


def safe_realpath(path: os.PathLike | str) -> Path | None:
    """os.path.realpath, or None when the path cannot be resolved (permission denied on the way,
    as for /proc/1/root): a path that cannot be resolved cannot be shown to be inside a root."""
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return None


def real_roots(roots: Iterable[os.PathLike | str]) -> list[Path]:
    """The configured roots, resolved; roots that are not existing directories are dropped."""
    resolved = []
    for root in roots:
        real = safe_realpath(root)
        if real is not None and real.is_dir() and real not in resolved:
            resolved.append(real)
    return resolved


def _permits(root: Path, real: Path) -> bool:
    """`real` lies below `root`, and not in a system tree unless the root itself is in that tree
    (a root of "/" does not open /proc; a root of /run/media/models still works)."""
    if not is_within(real, root):
        return False
    return not any(is_within(real, tree) and not is_within(root, tree) for tree in BLOCKED_TREES)


def resolve_model_path(raw: str | os.PathLike, roots: Iterable[os.PathLike | str]) -> Path:
    """Resolve a user-supplied model path and check it may be read.

    `raw` is absolute, or relative to a root (the roots are tried in order). Returns the real
    path (symlinks resolved), which exists and lies inside one of `roots`.

    Raises ModelSafetyError for an empty path, a NUL byte, a URL, any `..` component, no
    configured root, a real path outside every root (symlinks included) or inside a system
    tree (/proc, /sys, /dev, /etc, /boot, /run), and a path that does not exist. Containment
    is checked before existence, so the answer never reveals what exists outside the roots.
    """
    text = os.fspath(raw) if isinstance(raw, os.PathLike) else raw
    if not isinstance(text, str) or not text.strip():
        raise ModelSafetyError("A model path is required.")
    if "\x00" in text:
        raise ModelSafetyError("The model path contains a NUL byte.")
    if _URL.match(text):
        raise ModelSafetyError(
            "URLs are not model paths: give a local path inside the configured model roots "
            "(the server never fetches a user-supplied URL)."
        )
    if ".." in Path(text).parts:
        raise ModelSafetyError("'..' is not allowed in a model path; give a path inside the configured model roots.")
    allowed = real_roots(roots)
    if not allowed:
        raise ModelSafetyError("No model roots are configured, so no local model path can be used.")

    candidates = [Path(text)] if os.path.isabs(text) else [root / text for root in allowed]
    outside = False
    for candidate in candidates:
        real = safe_realpath(candidate)
        if real is None or not any(_permits(root, real) for root in allowed):
            outside = True
            continue
        if real.exists():
            return real
    if outside:
        raise ModelSafetyError(
            f"The model path {text!r} resolves outside the configured model roots (symlinks are followed)."
        )
    raise ModelSafetyError(f"The model path {text!r} does not exist.")
