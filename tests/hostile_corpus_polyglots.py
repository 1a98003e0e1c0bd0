"""The fifth red-team pass's file-side cases (issue 31: polyglots that other readers take for something harmless,
Hugging Face cache links, a `blobs` linked to `/`), added to the memory-capped subprocess corpus
(tests/test_hostile_corpus.py): every command on each, under its RLIMIT_AS and CPU caps. That torch.load runs
these payloads is proven in tests/test_hostile_polyglots.py and tests/test_hostile_links.py.
Not collected by pytest (no test_ prefix)."""
from __future__ import annotations

from typing import Any

import numpy as np
from hf_cache import hf_repo, hostile_blobs
from polyglots import Mkdir, flax_pickle, torch_bytes, truncated_head_pickle, two_directory_zip, zip_version_64
from safetensors.numpy import save_file

POLYGLOT_CASE_NAMES = [
    "two-directory zip read as npz", "two-directory zip read as keras", "msgpack map that is BINBYTES8",
    "pickle whose 4 KiB head is one opcode", "zip claiming version 6.4", "hf cache snapshot of a pickle",
    "hf cache blobs linked to /",
]
# Every reader refuses each at open (one line; its restricted unpickler refuses os.mkdir and runs nothing);
# `scan` follows torch.load and says unsafe, or, for the folder whose links lead out, skips them: exit 1 either way.


def add_polyglot_cases(tmp, cases: dict[str, Any], Case: type, outside) -> None:
    """Adds POLYGLOT_CASE_NAMES to `cases` (tmp: the corpus folder; outside: a folder nothing may read)."""
    marker = str(outside / "PWNED")
    (tmp / "two.npz").write_bytes(two_directory_zip(marker, "npz"))
    cases["two-directory zip read as npz"] = Case(str(tmp / "two.npz"), "open", expect={"scan": 1})
    (tmp / "two.keras").write_bytes(two_directory_zip(marker, "keras"))
    cases["two-directory zip read as keras"] = Case(str(tmp / "two.keras"), "open", expect={"scan": 1})
    (tmp / "flax_model.msgpack").write_bytes(flax_pickle(marker))
    cases["msgpack map that is BINBYTES8"] = Case(str(tmp / "flax_model.msgpack"), "open", expect={"scan": 1})
    (tmp / "model_best.pth.tar").write_bytes(truncated_head_pickle(marker))
    cases["pickle whose 4 KiB head is one opcode"] = Case(str(tmp / "model_best.pth.tar"), "open", expect={"scan": 1})
    (tmp / "checkpoint_last").write_bytes(zip_version_64(marker))
    cases["zip claiming version 6.4"] = Case(str(tmp / "checkpoint_last"), "open", expect={"scan": 1})

    import torch

    evil = torch_bytes({"w": torch.ones(2), "x": Mkdir(marker)})
    snap = hf_repo(tmp / "hub", {"pytorch_model.bin": evil, "config.json": b"{}"})
    cases["hf cache snapshot of a pickle"] = Case(str(snap), "open", expect={"scan": 1})

    save_file({"secret": np.ones(3, np.float32)}, str(outside / "secret.safetensors"))
    snap = hostile_blobs(tmp / "hub-blobs", {"model.safetensors": str(outside / "secret.safetensors"),
                                             "config.json": "/etc/passwd"})
    cases["hf cache blobs linked to /"] = Case(str(snap), "open", "outside", expect={"scan": 1})
