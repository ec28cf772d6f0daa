"""relay_metrics: NeMo Relay's ``resource_metrics`` Python API on the relay-metrics collector.

A Relay program switches by its imports alone::

    from relay_metrics import plugin, resource_metrics   # was: from nemo_relay import ...

and code that wants no process-wide activation uses :class:`Collector` directly.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from . import plugin, resource_metrics, subscribers
from ._collector import Collector
from .recording import Recording, record

try:
    __version__: str = _version("relay-metrics")
except _PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "unknown"

__all__ = [
    "Collector",
    "Recording",
    "plugin",
    "record",
    "recording",
    "resource_metrics",
    "subscribers",
]
