import json

from django import template
from django.urls import reverse
from django.utils import timezone

from a2a_platform.console.charts import activity_chart
from a2a_platform.console.views.base import asset_version

register = template.Library()


@register.simple_tag
def console_asset(name: str) -> str:
    return f"{reverse('console:asset', args=[name])}?v={asset_version(name)}"


@register.filter
def waited(since) -> str:
    """How long ago, compact: '42 s', '5 min', '3 h 10 min', '2 d 4 h'."""
    if since is None:
        return ""
    seconds = max(0, int((timezone.now() - since).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 24:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} d {hours % 24} h"


@register.filter
def pretty_json(value) -> str:
    """A stored JSON value, indented for reading (printed escaped, inside <pre>)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.filter
def actor_name(actor: str) -> str:
    """An audit actor for people: 'user:alice' is alice; clients and the system keep their prefix."""
    kind, _, name = str(actor).partition(":")
    return name if kind == "user" and name else str(actor)


@register.inclusion_tag("console/_charts.html")
def activity_charts(tenant, agent=None):
    """{% activity_charts tenant %} or {% activity_charts tenant agent %}: the last day, drawn."""
    return {"chart": activity_chart(tenant, agent=agent), "agent": agent}
