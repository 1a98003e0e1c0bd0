"""Tensors stored as several boxes of their elements (a DCP folder's per-rank chunks, a zarr array's chunk grid): any
range of the whole tensor's C-order elements gathered from the boxes it crosses."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CorruptCheckpointError
from .tensor import TensorInfo, read_flat_file

MAX_ASSEMBLE = 1 << 20                      # elements mapped at once when assembling chunks


@dataclass(frozen=True)
class Box:
    """The elements [offsets, offsets + sizes) of a tensor, stored as `tensor` (its own C order); `item`: what the
    format needs to decode them, None where `tensor` addresses them by offset."""
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    tensor: TensorInfo
    item: Any = None


class Assembler:
    """A tensor's elements [start, start + count) gathered from the boxes they fall in, MAX_ASSEMBLE elements at a
    time. Within a box the wanted elements span at most `count` of its own (its C order is the tensor's, restricted
    to the box). A tensor with no layout is read by offset (read_flat_file)."""

    def __init__(self) -> None:
        self.layouts: dict[str, list[Box]] = {}

    def values(self, name: str, box: Box, dtype: str, start: int, count: int) -> Any:
        """Elements [start, start + count) of one box, in its C order."""
        return read_flat_file(box.tensor, start, count)

    def __call__(self, info: TensorInfo, start: int, count: int) -> Any:
        import numpy as np

        boxes = self.layouts.get(info.name)
        if boxes is None:
            return read_flat_file(info, start, count)
        if len(boxes) == 1 and boxes[0].sizes == info.shape:   # one box, the whole tensor (a 0-d one included)
            return self.values(info.name, boxes[0], info.dtype, start, count)
        parts = []
        for lo in range(start, start + count, MAX_ASSEMBLE):
            n = min(MAX_ASSEMBLE, start + count - lo)
            idx = np.unravel_index(np.arange(lo, lo + n, dtype=np.int64), info.shape)
            block, filled = None, np.zeros(n, dtype=bool)
            for c in boxes:
                mask = np.ones(n, dtype=bool)
                for d, (o, s) in enumerate(zip(c.offsets, c.sizes)):
                    mask &= (idx[d] >= o) & (idx[d] < o + s)
                if not mask.any():
                    continue
                if (filled & mask).any():
                    raise CorruptCheckpointError(info.file, f"tensor {info.name!r}: two chunks hold one element")
                local = np.ravel_multi_index(tuple(i[mask] - o for i, o in zip(idx, c.offsets)), c.sizes)
                a, b = int(local.min()), int(local.max()) + 1
                # an element's values as a row (F4_X2: two)
                values = self.values(info.name, c, info.dtype, a, b - a).reshape(b - a, -1)
                if block is None:
                    block = np.empty((n, values.shape[1]), dtype=values.dtype)
                block[mask] = values[local - a]
                filled |= mask
            if block is None or not filled.all():
                raise CorruptCheckpointError(info.file, f"tensor {info.name!r}: elements from {lo:,} lie in no chunk")
            parts.append(block.reshape(-1))
        return np.concatenate(parts)
