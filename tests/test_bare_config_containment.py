"""`flops` / `memory` of a folder holding a config.json and no weights (red-team pass `scan2`, docs/security.md
"Containment"): a config.json linked out of the folder was read and sized (exit 0) without --allow-external, while the
same link beside weights is refused. Now refused in one line before it is read; naming the link itself, or
--allow-external, still reads it."""
from __future__ import annotations

import os

import pytest

from ckptstat.cli import main

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("command", ["flops", "memory"])
def test_a_bare_config_linked_out_of_the_folder_is_refused(tmp_path, capsys, command):
    (tmp_path / "outside").mkdir()
    (tmp_path / "m").mkdir()
    transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000).save_pretrained(str(tmp_path / "outside"))
    os.symlink(tmp_path / "outside" / "config.json", tmp_path / "m" / "config.json")
    assert main([command, str(tmp_path / "m")]) == 1
    err = capsys.readouterr().err
    assert "outside the checkpoint; not followed" in err and "config.json" in err, err
    assert main([command, "--allow-external", str(tmp_path / "m")]) == 0
    assert main([command, str(tmp_path / "m" / "config.json")]) == 0
