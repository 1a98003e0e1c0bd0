"""Layer 4, census: the facts every analysis shares, computed once per checkpoint (memoised on it):
placements, aliases and tie evidence, the unique parameter count, and the resolved architecture.
Imports only from core, formats, naming and families (docs/architecture.md)."""
from .counts import aliases, architecture, memoised, name_matches, parameters, placements
from .quant import QuantLayout, QuantWeight, layout, logical, stored
from .resolve import Resolution, resolve

__all__ = ["QuantLayout", "QuantWeight", "Resolution", "aliases", "architecture", "layout", "logical", "memoised", "name_matches",
           "parameters", "placements", "resolve", "stored"]
