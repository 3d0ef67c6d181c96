"""The one error the inference engine raises for bad input from a user."""

from __future__ import annotations


class InferenceInputError(ValueError):
    """A request the engine refuses before running anything: `field` names what is wrong
    ("max_new_tokens", "temperature", "prompt", "messages[2].role", ...), `message` says why in
    words meant for the user, `index` is the request's position in a batch when there is one."""

    def __init__(self, field: str, message: str, *, index: int | None = None):
        self.field = field
        self.message = message
        self.index = index
        where = f"request {index}: " if index is not None else ""
        super().__init__(f"{where}{field}: {message}")
