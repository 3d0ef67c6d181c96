"""The export formats (workers.ingest.export_formats) for templates:
{% load export_formats %}{% export_formats stream=True as formats %}."""

from django import template

from workers.ingest.export_formats import EXPORT_FORMATS

register = template.Library()


@register.simple_tag
def export_formats(stream: bool = False) -> list:
    """Every export format, or those that stream, in the registry's order."""
    return [f for f in EXPORT_FORMATS.values() if f.stream or not stream]
