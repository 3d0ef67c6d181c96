"""A generation's stream, published to `generation.<id>`: text deltas, then done or error."""

from apps.core.rendering import render_markdown
from apps.projects.events import send


def generation_group(generation_id: int) -> str:
    return f"generation.{generation_id}"


def delta(generation_id: int, text: str, logprobs: list[dict] | None = None) -> None:
    """Text as it is generated; with logprobs asked for, the entries of the tokens behind it."""
    message = {"type": "generation.delta", "id": generation_id, "text": text}
    if logprobs is not None:
        message["logprobs"] = logprobs
    send(generation_group(generation_id), message)


def finished(generation) -> None:
    """The end of a stream, with the whole answer rendered as Markdown (raw HTML shown as text):
    the page streams plain text, then shows the rendered answer."""
    kind = "generation.done" if generation.state == "succeeded" else "generation.error"
    send(generation_group(generation.pk), {"type": kind, "id": generation.pk, "result": generation.result(),
                                           "html": render_markdown(generation.output)})
