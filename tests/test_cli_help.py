"""--help ends with real examples on every command, whose options the command has; shell completion is
on (typer's: `ckptstat --install-completion`), answered through the protocol the installed script uses."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
import typer

from ckptstat.cli import app
from ckptstat.commands.examples import EXAMPLES

COMMAND = typer.main.get_command(app)


def test_every_command_has_examples():
    assert set(EXAMPLES) == set(COMMAND.commands)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_use_options_the_command_has(name, cli):
    options = {o for p in COMMAND.commands[name].params for o in (*p.opts, *p.secondary_opts)}
    for example in EXAMPLES[name]:
        words = shlex.split(example.split("||")[0].split(">")[0])
        assert words[0] == "ckptstat", example
        assert name in words or name == "summary", example
        for w in words:
            if w.startswith("-"):
                assert w in options, (example, w)
    rc, out, err = cli(name, "--help")
    assert rc == 0 and "Examples" in out and EXAMPLES[name][0] in out, err


def _complete(words: str) -> list[str]:
    env = {**os.environ, "_CKPTSTAT_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}
    r = subprocess.run([sys.executable, "-m", "ckptstat"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_shell_completion_completes_commands_and_options():
    assert _complete("ckptstat su") == ["summary"]
    assert {"--gpu", "--gpu-mem", "--gpus"} <= set(_complete("ckptstat memory --gp"))


def test_completion_options_are_listed(cli):
    rc, out, err = cli("--help")
    assert rc == 0 and "--install-completion" in out and "--show-completion" in out
