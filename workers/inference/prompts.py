"""Turn a request (chat messages or a plain prompt) into the prompt text, and text into ids."""

from __future__ import annotations

from typing import Any

from .errors import InferenceInputError

ROLES = ("system", "user", "assistant")
MAX_MESSAGES = 1000


def render_prompt(tokenizer: Any, *, messages: list[dict] | None = None, prompt: str | None = None) -> str:
    """The prompt text: `messages` (a list of {"role": system|user|assistant, "content": str})
    rendered by the tokenizer's chat template with the generation prompt added, or `prompt`
    as it is. Exactly one of the two. Raises InferenceInputError naming the offending field
    ("messages[3].role", ...)."""
    if (messages is None) == (prompt is None):
        raise InferenceInputError("messages", "send either chat messages or a prompt, not both and not neither.")
    if prompt is not None:
        if not isinstance(prompt, str):
            raise InferenceInputError("prompt", "must be a string.")
        return prompt
    validate_messages(messages)
    if not getattr(tokenizer, "chat_template", None):
        raise InferenceInputError("messages", "this model has no chat template; send a plain prompt instead.")
    from jinja2.exceptions import TemplateError

    plain = [{"role": m["role"], "content": m["content"]} for m in messages]
    try:
        text = tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
    except TemplateError as exc:  # the template's own raise_exception: e.g. roles that must alternate
        raise InferenceInputError("messages", f"the model's chat template refused them: {exc}") from None
    return text


def validate_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise InferenceInputError("messages", "must be a non-empty list of {role, content} objects.")
    if len(messages) > MAX_MESSAGES:
        raise InferenceInputError("messages", f"at most {MAX_MESSAGES} messages.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InferenceInputError(f"messages[{i}]", "must be an object with a role and a content.")
        extra = sorted(str(k) for k in message if k not in ("role", "content"))
        if extra:
            raise InferenceInputError(f"messages[{i}]", f"unexpected key(s): {', '.join(extra)}; "
                                                        "only role and content are allowed.")
        if message.get("role") not in ROLES:
            raise InferenceInputError(f"messages[{i}].role", f"must be one of {', '.join(ROLES)}.")
        if not isinstance(message.get("content"), str):
            raise InferenceInputError(f"messages[{i}].content", "must be a string.")


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a prompt text. The tokenizer's special tokens (a BOS, for tokenizers that add
    one) are added unless the text already starts with the BOS token, as the text of a chat
    template that writes it does: the BOS is never doubled."""
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and text.startswith(bos))
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])
