"""Format readers. Each module registers itself with `registry`."""
from .registry import FORMATS, Format, Probe, detect, open_checkpoint, register

__all__ = ["FORMATS", "Format", "Probe", "detect", "open_checkpoint", "register"]
