"""relay_metrics: NeMo Relay's ``resource_metrics`` Python API on the relay-metrics collector.

A Relay program switches by its imports alone::

    from relay_metrics import plugin, resource_metrics   # was: from nemo_relay import ...

and code that wants no process-wide activation uses :class:`Collector` directly.
"""

from . import plugin, resource_metrics, subscribers
from ._collector import Collector

__all__ = ["Collector", "plugin", "resource_metrics", "subscribers"]
