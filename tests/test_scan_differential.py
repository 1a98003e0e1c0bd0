"""`ckptstat scan` against torch.load itself (issue 14): every file of the corpus written by
fixtures/make_scan_corpus.py is loaded with torch.load(weights_only=False) in a throw-away subprocess,
whose payloads only create marker files. scan must flag exactly the files where a marker appeared,
and say weights_only=True loads exactly the files torch.load(weights_only=True) loads."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import library_runner
import pytest

pytest.importorskip("torch")

from conftest import fixture_script  # noqa: E402

_make_scan_corpus = fixture_script("make_scan_corpus")
write_corpus = _make_scan_corpus.write_corpus

from ckptstat.analysis.scan.torch_load import scan  # noqa: E402
from ckptstat.cli import main  # noqa: E402
from ckptstat.errors import CkptstatError  # noqa: E402

LOADER = """
import os, sys, warnings, torch
warnings.simplefilter("ignore")
for path in sys.argv[1:]:
    try:
        torch.load(path, weights_only=False)
    except BaseException:
        pass
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("scan"))
    cases = write_corpus(folder)
    paths = [os.path.join(folder, c) for c in sorted(cases)]
    library_runner.python(LOADER, *paths, cwd=folder)
    ran = {c: os.path.exists(os.path.join(folder, c + ".marker")) for c in cases}
    return folder, cases, ran


def test_corpus_size(corpus):
    _, cases, ran = corpus
    assert sum(not bad for bad in cases.values()) >= 6
    assert sum(ran.values()) >= 20, "the corpus must hold at least 20 files torch.load runs code from"
    assert not any(ran[c] for c, bad in cases.items() if not bad), "a benign control ran code"


def _flagged(path: str) -> bool:
    try:
        return scan(path)["would_run_code"]
    except CkptstatError:
        return False   # an unreadable file is not a "safe" verdict, but neither is it a flag


def test_scan_flags_exactly_what_torch_runs(corpus):
    folder, cases, ran = corpus
    got = {c: _flagged(os.path.join(folder, c)) for c in cases}
    missed = sorted(c for c in cases if ran[c] and not got[c])
    false_alarms = sorted(c for c in cases if got[c] and not ran[c])
    assert not missed and not false_alarms, f"missed: {missed}; false alarms: {false_alarms}"


def test_scan_exit_codes(corpus, capsys):
    folder, cases, ran = corpus
    for c in ("benign-zip.pt", "evil-zip.pt"):
        rc = main(["scan", os.path.join(folder, c), "--json"])
        out = json.loads(capsys.readouterr().out)
        assert rc == (1 if ran[c] else 0), (c, out["verdict"])
    # 1 also when scan cannot tell (a TorchScript archive: torch.load runs its code through torch.jit.load)
    if "evil-torchscript.pt" in cases:
        assert main(["scan", os.path.join(folder, "evil-torchscript.pt")]) == 1
        assert "UNKNOWN" in capsys.readouterr().out
    # 2: a file torch.load cannot read at all (the pickle it holds is never reached: named on the line)
    assert main(["scan", os.path.join(folder, "evil-tar.pt")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no 'storages' member" in captured.err and "builtins.exec" in captured.err
    # the folder: one line per file, then the totals; 1 because some file is unsafe
    assert main(["scan", folder]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    statuses = [line.split()[0] for line in lines if line.split()[0] in ("SAFE", "UNSAFE", "UNKNOWN", "UNREADABLE")]
    assert len(statuses) == len(cases) and lines[-1].startswith(f"{len(cases)} file(s) scanned")


WEIGHTS_ONLY_LOADER = """
import json, sys, warnings, torch
warnings.simplefilter("ignore")
out = {}
for path in sys.argv[1:]:
    try:
        torch.load(path, weights_only=True)
        out[path] = None
    except BaseException as e:
        out[path] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(out))
"""


def test_weights_only_verdict_matches_torch(corpus, tmp_path):
    """`weights_only_loadable` is what torch.load(weights_only=True) does with the same file (run in a
    folder of its own: nothing it could create lands in the corpus)."""
    folder, cases, _ = corpus
    paths = [os.path.join(folder, c) for c in sorted(cases)]
    proc = subprocess.run([sys.executable, "-c", WEIGHTS_ONLY_LOADER, *paths], cwd=tmp_path, timeout=300,
                          capture_output=True, text=True)
    torch_says = json.loads(proc.stdout.strip().splitlines()[-1])
    wrong = []
    for p in paths:
        try:
            mine = scan(p)["weights_only_loadable"]
        except CkptstatError:
            mine = False
        if mine != (torch_says[p] is None):
            wrong.append((os.path.basename(p), mine, torch_says[p]))
    assert not wrong, wrong
    assert sum(v is None for v in torch_says.values()) >= 6, "too few files weights_only accepts to tell anything"


def test_the_reader_reads_the_pickle_torch_reads(corpus):
    """`ckptstat summary` opens the data.pkl torch.load would unpickle (any case, the one miniz finds
    among duplicates) and the legacy stream however its magic number is pickled: it refuses exactly
    the files torch.load runs code from, and opens the benign ones torch.save wrote."""
    from ckptstat import open_checkpoint
    from ckptstat.errors import UnsafeCheckpointError

    folder, cases, ran = corpus
    for c in sorted(cases):
        if not c.startswith("benign-") and not c.startswith("evil-zip"):
            continue
        path = os.path.join(folder, c)
        try:
            open_checkpoint(path)
            refused = False
        except UnsafeCheckpointError:
            refused = True
        except CkptstatError as e:   # torch refuses it too; or a tensor kind ckptstat does not read
            assert c in ("evil-zip-outside-folder.pt", "benign-tar.pt") or "not supported" in str(e), (c, e)
            continue
        assert refused == ran[c], c
