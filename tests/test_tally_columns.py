"""The census's tally (census/tally.py) sums by distinct (placement, dtype, element count) key over the tensors'
columns (issue 35). It must give what a name-by-name reading of the same checkpoint gives: the same sums in the same
first-seen order, aliases counted once, quantised weights by their method and pieces, non-parameter roles and
unplaced parameters listed in the file's order, and the module tree's rows. Checked on saves that hold each case."""
from __future__ import annotations

import pytest
from conftest import fixture

from ckptstat.census.counts import aliases, placements
from ckptstat.census.quant import logical, stored
from ckptstat.census.tally import tally
from ckptstat.core import dtypes
from ckptstat.formats.registry import open_checkpoint


def _name_by_name(ckpt) -> dict:
    """The tally's fields, one tensor at a time on the logical view's TensorInfos."""
    view = logical(ckpt)
    place, alias_of = placements(view), aliases(view)
    out: dict = {"total": 0, "tensor_bytes": 0, "buckets": {}, "layers": {}, "by_dtype": {}, "non_params": {},
                 "unplaced": [], "tree": ([], [], [])}
    groups: dict = {}
    for t in view:
        if t.name in alias_of:
            continue
        out["tensor_bytes"] += t.nbytes
        p = place[t.name]
        if p.role != "parameter":
            row = out["non_params"].setdefault(p.role, {"role": p.role, "tensors": 0, "elements": 0, "bytes": 0,
                                                        "names": []})
            row["tensors"] += 1
            row["elements"] += t.numel
            row["bytes"] += dtypes.get(t.dtype).nbytes(t.numel)
            row["names"].append(t.name)
            continue
        label, nbytes = stored(t)
        s = groups.setdefault((p.bucket, p.layer, label), [0, 0, 0])
        s[0] += t.numel
        s[1] += nbytes
        s[2] += 1
        if p.bucket == "other":
            out["unplaced"].append(t.name)
        for column, value in zip(out["tree"], (t.name, t.numel, nbytes)):
            column.append(value)
    for (bucket, layer, label), s in groups.items():
        out["total"] += s[0]
        for table, key in ((out["buckets"], bucket), (out["by_dtype"], label), (out["layers"], (bucket, layer))):
            if table is not out["layers"] or layer is not None:
                into = table.setdefault(key, [0, 0, 0])
                for i in range(3):
                    into[i] += s[i]
    return out


CASES = [
    "bert-tiny-buffers",                       # buffers (position ids) beside the parameters
    "gpt2-tiny",
    "torch/bert-mlm",                          # torch.save: the tied decoder is an alias of the embeddings
    "torch/train.pt",                          # a training checkpoint: optimizer state and step counters
    "training/deepspeed-zero2/global_step2",
    "quantized/bnb-nf4-llama",                 # quantised weights: their method and pieces
    "quantized/bnb-int8-llama",
    "quantized/hqq-4bit-qwen2",
    "quantized/quanto-qint4-llama-grouped",
    "quantized/torchao-float8-llama",
    "quantized/ct014-sparse24",
    "gguf/llama-tiny-q.gguf",                  # GGUF block-quantised types: bytes by block
]


@pytest.mark.parametrize("case", CASES)
def test_tally_equals_the_name_by_name_reading(case):
    ckpt = open_checkpoint(fixture(*case.split("/")))
    got = tally(ckpt)
    want = _name_by_name(ckpt)
    for field, value in want.items():
        mine = getattr(got, field)
        assert mine == value, field
        if isinstance(value, dict):
            assert list(mine) == list(value), f"{field}: first-seen order"
