"""``{% replica_lag %}``: the replica's lag, for the console's pages."""

from typing import Any

from django import template

from ..console import replica

register = template.Library()


@register.inclusion_tag("jobs/replica_lag.html")
def replica_lag() -> dict[str, Any]:
    return {"configured": replica.configured(), "lag": replica.lag_seconds()}
