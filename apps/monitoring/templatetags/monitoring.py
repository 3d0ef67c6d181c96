from django import template

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """3 s, 4 min 05 s, 2 h 07 min, 3 d 4 h: an age or uptime at a glance."""
    if seconds is None or seconds == "":
        return "—"
    seconds = int(float(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@register.filter
def percent(fraction) -> str:
    return "—" if fraction is None else f"{fraction:.1%}"


@register.filter
def milliseconds(seconds) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"
