from django import template

register = template.Library()


@register.filter
def accessible_widget(field):
    """Render a bound field's widget tied to its help text and errors for screen readers."""
    described_by = []
    if field.help_text:
        described_by.append(f"{field.auto_id}_helptext")
    attrs = {}
    if field.errors:
        described_by.insert(0, f"{field.auto_id}_error")
        attrs["aria-invalid"] = "true"
    if described_by:
        attrs["aria-describedby"] = " ".join(described_by)
    return field.as_widget(attrs=attrs)
