"""The scanners of other loaders' files (analysis/scan/pt2.py, package.py, compressed.py, saved_model.py, nemo.py,
chat_templates.py and jinja.py, hf_config.py) under the
fuzz worker's contract (tests/fuzz/fuzzlib.py: only CkptstatError comes out, memory bounded by the input, the
case's folder unchanged): seeded bit flips, cut points and byte runs of real files, each scanned as `ckptstat scan`
scans a path (`scan_path`)."""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "fuzz"))
from fuzzlib import FIX, Case, check  # noqa: E402

SAMPLES = {   # name -> (file under fixtures/, the name it is scanned under)
    "pt2": ("pt2/mixed.pt2", "model.pt2"),
    "pt2 two programs": ("pt2/two.pt2", "two.pt2"),
    "joblib gzip": ("joblib/payload-gzip.joblib", "m.joblib"),
    "joblib xz": ("joblib/payload-xz.joblib", "m.joblib"),
    "joblib zlib arrays": ("joblib/arrays-zlib.joblib", "m.joblib"),
    "joblib lzma": ("joblib/arrays-lzma.joblib", "m.joblib"),
    "joblib plain dtypes": ("joblib/dtypes-plain.joblib", "m.joblib"),
    "joblib plain forest": ("joblib/sklearn-forest-plain.joblib", "m.pkl"),
    "joblib zfile": ("joblib/zfile-payload.joblib", "m.joblib"),
    "saved model": ("tf-saved-model-ops/write_file/saved_model.pb", "saved_model.pb"),
    "gguf chat templates": ("chat-templates/templates.gguf", "model.gguf"),
    "jinja chat template": ("chat-templates/chat_template.jinja", "chat_template.jinja"),
    "tokenizer config": ("chat-templates/tokenizer_config.json", "tokenizer_config.json"),
    "nemo": ("nemo/config-os-system.nemo", "model.nemo"),
    "nemo gzip": ("nemo/benign-quartznet-gz.nemo", "model.nemo"),
    "nemo sharded": ("nemo/benign-megatron-gpt-dist.nemo", "weights.tar"),
}
CASES = 24


def _mutants(data: bytes, rng: random.Random) -> list[bytes]:
    out = []
    for _ in range(CASES):
        b = bytearray(data)
        how = rng.randrange(3)
        if how == 0:
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif how == 1:
            del b[rng.randrange(1, len(b)):]
        else:
            i = rng.randrange(len(b))
            b[i:i + 8] = rng.choice([b"\xff" * 8, b"\x00" * 8, b"\x7f\xff\xff\xff\xff\xff\xff\xff"])
        out.append(bytes(b))
    return out


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_mutated_files_scan_or_fail_in_one_line(sample):
    path, name = SAMPLES[sample]
    with open(os.path.join(FIX, path), "rb") as f:
        data = f.read()
    rng = random.Random(f"ckptstat scan loaders {sample}")   # a str seed: the same cases every run
    for blob in _mutants(data, rng):
        with Case() as c:
            check(f"scan {sample}", c.write(name, blob), action="scan_path")
