"""Markdown for people's text (guidelines, prompts, responses): a CommonMark subset with code
blocks and tables, where raw HTML is shown as text, images are not fetched and links to
javascript:/data: are refused (markdown-it's js-default preset, images off)."""

from markdown_it import MarkdownIt

_markdown = MarkdownIt("js-default").disable("image")


def render_markdown(text: str | None) -> str:
    return _markdown.render(text or "")
