"""What a TF or Keras file says about a 2-D weight's layout through its variable's name
(docs/tensorflow.md): a Dense `kernel` (Keras 3: `_kernel`) is stored [in, out], for y = x @ kernel,
where torch's nn.Linear stores [out, in]. Shared by the TF bundle and Keras HDF5 readers."""
from __future__ import annotations

import re

_KERNEL = re.compile(r"(^|[/.])_?kernel(:\d+|/\.ATTRIBUTES/VARIABLE_VALUE)?$")


def dense_layout(name: str, shape: tuple[int, ...]) -> str | None:
    """"in_out" for a 2-D Dense kernel, else None (the file says nothing about the layout)."""
    return "in_out" if len(shape) == 2 and _KERNEL.search(name) else None
