"""Layer 1, core: the data model (Checkpoint, TensorInfo), the dtype table and bounded byte reads.
Imports nothing from the layers above it (docs/architecture.md)."""
from .tensor import DEFAULT_CHUNK_BYTES, Checkpoint, Reader, TensorInfo

__all__ = ["Checkpoint", "TensorInfo", "Reader", "DEFAULT_CHUNK_BYTES"]
