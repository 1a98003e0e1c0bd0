"""Training folders' side files linked out of the folder (red-team pass `scan2`, docs/security.md "Containment"). A
Trainer checkpoint's `trainer_state.json` linked to another run's was read and shown (`training  Hugging Face Trainer,
step N`, exit 0), and a DeepSpeed run's `latest` linked to any file had its first 60 characters printed in the error
line, both without --allow-external. Each is now refused in one line before it is read (formats/registry.py
`read_json`, formats/training.py `_latest`)."""
from __future__ import annotations

import os

import pytest

from ckptstat.cli import main

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _refused(capsys, folder, name):
    assert main(["summary", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "outside the checkpoint; not followed" in err and name in err and "SECRET" not in err, err


def test_trainer_state_linked_out_is_refused(tmp_path, capsys):
    run = tmp_path / "checkpoint-10"
    run.mkdir()
    (tmp_path / "outside").mkdir()
    safetensors_torch.save_file({"w": torch.zeros(2)}, str(run / "model.safetensors"))
    transformers.TrainerState(global_step=424242).save_to_json(str(tmp_path / "outside" / "trainer_state.json"))
    os.symlink(tmp_path / "outside" / "trainer_state.json", run / "trainer_state.json")
    _refused(capsys, run, "trainer_state.json")
    assert main(["summary", "--allow-external", str(run)]) == 0
    assert "step 424242" in capsys.readouterr().out


def test_deepspeed_latest_linked_out_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "secret.txt").write_text("SECRET-TOKEN-0123456789\n")
    os.symlink(tmp_path / "secret.txt", run / "latest")
    _refused(capsys, run, "latest")
