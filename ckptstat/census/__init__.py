"""Layer 4, census: the facts every analysis shares, computed once per checkpoint (Checkpoint.derived):
placements, aliases and tie evidence, the unique parameter count, and the resolved architecture.
Imports only from core, formats, naming and families (docs/architecture.md)."""
from typing import TYPE_CHECKING

from .counts import aliases, architecture, name_matches, parameters, placements
from .quant import QuantLayout, QuantWeight, layout, logical, stored
from .tally import optimizer_only, optimizer_only_text, optimizer_state

if TYPE_CHECKING:
    from .resolution import Resolution, resolve


def __getattr__(name: str) -> object:
    """`resolve` and `Resolution` load every family module (~50 ms): only when asked, so that a command that
    needs placements alone (`stats`, whose start-up is serial in every --workers run) does not pay for them."""
    if name in ("Resolution", "resolve"):
        from . import resolution

        return getattr(resolution, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["QuantLayout", "QuantWeight", "Resolution", "aliases", "architecture", "layout", "logical", "name_matches",
           "optimizer_only", "optimizer_only_text", "optimizer_state", "parameters", "placements", "resolve", "stored"]
