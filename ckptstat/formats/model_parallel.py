"""Meta's model-parallel folders: Llama's `original/` of a 13B and larger model, `consolidated.00.pth` ...
`consolidated.NN.pth` beside `params.json`, each file one model-parallel rank's slice of every weight (fairscale's
ColumnParallelLinear / RowParallelLinear, VocabParallelEmbedding / ParallelEmbedding), the norms whole in each.

The folder is read as transformers' convert_llama_weights_to_hf.py joins it (docs/formats.md 16): `attention.wo`
and `feed_forward.w2` (row-parallel) along their input dimension, `tok_embeddings` along whichever dimension its
slice is narrower than the whole (Llama 3's vocabulary rows, Llama 1 and 2's columns), every other weight along its
output dimension; a tensor of one dimension (the norms, Llama 1's `rope.freqs`) is the same in every file and read
from the first, as the converter reads it. Values are read slice by slice from each file (core/chunked.py), never
joined in memory. Only a params.json that reads as Llama's config is joined; any other folder of several files keeps
the one-line refusal of several weights files."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ..core import Checkpoint, TensorInfo
from ..core.chunked import Assembler, Box
from ..core.files import check_inside
from ..errors import CorruptCheckpointError
from .configs import load_config, take_config
from .native_params import PARAMS, RANK, find_params
from .registry import _FOLDER_HOOKS
from .registry import _open_file as open_weights

ROW_PARALLEL = re.compile(r"(^|\.)(attention\.wo|feed_forward\.w2)\.weight$")   # joined along dimension 1
EMBEDDING = "tok_embeddings.weight"


class _Slices(Assembler):
    """Each box one rank's slice, read through that rank's own Checkpoint (its reader, its file)."""

    def values(self, name: str, box: Box, dtype: str, start: int, count: int) -> Any:
        return box.item.read_elements(box.tensor.name, start, count)


def _joined_dim(name: str, shape: tuple[int, ...], hidden: int) -> int | None:
    """The dimension the ranks' slices of `name` join along; None for one held whole by every rank."""
    if len(shape) <= 1:
        return None
    if name.endswith(EMBEDDING):
        return 0 if shape[1] == hidden else 1
    return 1 if ROW_PARALLEL.search(name) else 0


def open_folder(folder: str, _open_file: Callable[[str], Checkpoint]) -> Checkpoint | None:
    """Every rank's file of a Meta model-parallel folder, joined; None for a folder of one file or no such files, or
    whose params.json does not read as Llama's (the folder is then resolved as any other). Each rank's file is read
    alone (`_open_file`, open_checkpoint's, would look for a config beside every one), params.json once."""
    names = sorted(n for n in os.listdir(folder) if RANK.match(n))
    if len(names) < 2:
        return None
    found = find_params(folder)
    if found is None:
        return None
    check_inside(found, PARAMS, folder)

    def weights(path: str) -> Checkpoint:   # (a rank's file alone, read once: no config looked for beside each)
        check_inside(path, "file", folder)
        return open_weights(path)

    paths = [os.path.join(folder, n) for n in names]
    first = weights(paths[0])
    take_config(first, found, load_config(found))   # (the embedding's rows for a vocabulary of -1: any rank's)
    cfg = first.config or {}
    if first.config_from != PARAMS or cfg.get("model_type") != "llama":
        return None
    ranks = [int(RANK.match(n)[1]) for n in names]   # type: ignore[index]
    if ranks != list(range(len(ranks))):
        missing = sorted(set(range(ranks[-1] + 1)) - set(ranks))
        raise CorruptCheckpointError(folder, f"the model-parallel file(s) consolidated.{missing[0]:02d}.pth ... are "
                                             f"missing ({len(names)} of {ranks[-1] + 1} present)")
    parts = [first] + [weights(p) for p in paths[1:]]
    hidden, reader = int(cfg["hidden_size"]), _Slices()
    tensors: dict[str, TensorInfo] = {}
    for name, t in first.tensors.items():
        slices = []
        for p in parts:
            s = p.tensors.get(name)
            if s is None or s.dtype != t.dtype or s.shape != t.shape:
                got = "no such tensor" if s is None else f"{s.dtype}{list(s.shape)}"
                raise CorruptCheckpointError(p.path, f"{name!r} is {got} here, {t.dtype}{list(t.shape)} in {names[0]}: "
                                                     "the model-parallel files must hold the same slices")
            slices.append(s)
        dim = _joined_dim(name, t.shape, hidden)
        if dim is None:
            reader.layouts[name] = [Box((0,) * len(t.shape), t.shape, t, first)]
            tensors[name] = TensorInfo(name=name, dtype=t.dtype, shape=t.shape, file=t.file, offset=None, nbytes=t.nbytes,
                                       extra={"model_parallel": "the same in every file, read from the first"})
            continue
        shape = tuple(d * len(parts) if i == dim else d for i, d in enumerate(t.shape))
        reader.layouts[name] = [Box(tuple(k * t.shape[dim] if i == dim else 0 for i in range(len(shape))), t.shape, s, p)
                                for k, (s, p) in enumerate(zip(slices, parts))]
        tensors[name] = TensorInfo(name=name, dtype=t.dtype, shape=shape, file=t.file, offset=None,
                                   nbytes=t.nbytes * len(parts), extra={"model_parallel": f"joined along dimension {dim}"})
    extra = [n for p in parts[1:] for n in p.tensors if n not in first.tensors]
    if extra:
        raise CorruptCheckpointError(parts[1].path, f"{extra[0]!r} is in no other model-parallel file")
    ckpt = Checkpoint(path=folder, format=first.format, tensors=tensors, files=tuple(paths),
                      metadata={"model_parallel.files": str(len(parts))}, config=first.config,
                      config_path=first.config_path, config_from=first.config_from,
                      readers=dict.fromkeys(paths, reader), notes=list(first.notes))
    ckpt.notes.append(f"{len(parts)} model-parallel files (Meta's consolidated.NN.pth), each a slice of every weight: "
                      "joined as transformers' convert_llama_weights_to_hf.py joins them (the norms from the first; "
                      "their copies in the others are file bytes, not tensor bytes)")
    return ckpt


_FOLDER_HOOKS.append(open_folder)
