"""Zips whose directory torch.load or np.load finds where scan did not (tests/zip_directories.py; docs/security.md,
the twenty-second pass): the real loader, in a throw-away process, runs each payload; `scan FILE` and a folder scan
(under the names users have) must say UNSAFE."""
from __future__ import annotations

import pytest
import zip_directories as z
from polyglots import loader_runs, torch_load_runs

from ckptstat.analysis.scan import scan_path

pytest.importorskip("torch")

TORCH = {   # file name in a folder -> builder
    "checkpoint_last": z.end_record_far_back,
    "model.pt": z.zip64_locator_far_back,
    "pytorch_model.bin": z.zip64_locator_too_early,
    "ckpt.pth": z.unread_entry_size_max,
    "last.ckpt": lambda m: z.unread_entry_size_max(m, zip64_field=True),
}
NUMPY = {"weights.npz": lambda m: z.npz_sizes_unchecked(m, False),
         "arrays.npz": lambda m: z.npz_sizes_unchecked(m, True)}


def _numpy_runs(path: str, marker: str) -> bool:
    return loader_runs(z.NP_LOADER, path, marker)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("zips")
    for name, build in {**TORCH, **NUMPY}.items():
        (out / name).write_bytes(build(str(out / f"RAN-{name}")))
    return out


@pytest.mark.parametrize("name", sorted({**TORCH, **NUMPY}))
def test_the_loader_runs_it_and_scan_says_unsafe(folder, name):
    runs = torch_load_runs if name in TORCH else _numpy_runs
    assert runs(str(folder / name), str(folder / f"RAN-{name}")), "the payload must run under the real loader"
    r = scan_path(str(folder / name))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["os.mkdir"], r["verdict"]


def test_a_folder_scan_lists_every_one(folder):
    r = scan_path(str(folder))
    assert {f["path"]: f["status"] for f in r["files"]} == {n: "unsafe" for n in {**TORCH, **NUMPY}}
