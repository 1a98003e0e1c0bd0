"""The quick path (ckptstat/commands/quick.py) answers `ckptstat [summary] PATH --json` exactly as the
typer command does: same exit code, stdout and stderr, on good and bad input; every other line is left
to typer; and it loads no CLI framework, no rich, no numpy."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import fixture

from ckptstat.commands import quick
from ckptstat.formats import registry


def _both(cli, monkeypatch, *args: str) -> tuple[tuple, tuple]:
    fast = cli(*args)
    monkeypatch.setattr(quick, "ENABLED", False)
    slow = cli(*args)
    monkeypatch.setattr(quick, "ENABLED", True)
    return fast, slow


def _lines(tmp_path) -> list[list[str]]:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 8 + b"{}")
    hostile = tmp_path / "ctrl.safetensors"
    hostile.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00" + b'{"\x1b[31m": 1}  ')
    st = fixture("bert-tiny", "model.safetensors")
    return [
        ["--json", st],
        [st, "--json"],
        ["summary", "--json", st],
        ["summary", st, "--json", "--layers"],
        ["--json", fixture("llama-tiny-sharded")],
        ["--json", st, "--config", fixture("bert-tiny", "config.json")],
        ["--json", f"--config={fixture('bert-tiny', 'config.json')}", st],
        ["--json", st, "--config", str(tmp_path / "missing.json")],
        ["--json", str(tmp_path / "missing.safetensors")],
        ["--json", str(bad)],
        ["--json", str(hostile)],
        ["--json", str(tmp_path)],
        ["--json", "nul\x00byte.safetensors"],
        ["stats", st, "--json", "--no-progress"],
        ["stats", "--json", st, "-w", "2", "--no-progress"],
        ["stats", st, "--json", "--workers=2", "--chunk-bytes", "4096", "--progress"],
        ["stats", st, "--json", "--config", fixture("bert-tiny", "config.json")],
        ["stats", str(tmp_path / "missing.safetensors"), "--json"],
        ["stats", str(bad), "--json"],
        ["stats", str(_buffers_only(tmp_path)), "--json"],   # nothing selected: exit 1, said on stderr
        ["stats", st, "--json", "--chunk-bytes", "0"],       # refused by the command
    ]


def _buffers_only(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file
    path = tmp_path / "ids.safetensors"
    save_file({"embeddings.position_ids": np.arange(8, dtype=np.int64)[None]}, str(path))
    return path


def _untimed(answer: tuple) -> tuple:
    rc, out, err = answer
    return rc, re.sub(r'"seconds": [0-9.e+-]+', '"seconds": 0', out), err   # stats' run time


def test_same_answer_as_typer(cli, monkeypatch, tmp_path):
    for line in _lines(tmp_path):
        assert quick._parse(line) is not None, line
        fast, slow = _both(cli, monkeypatch, *line)
        assert _untimed(fast) == _untimed(slow), line


@pytest.mark.parametrize("line", [
    [], ["--help"], ["summary", "--help"], ["x.safetensors"], ["summary", "x.safetensors"],
    ["stats", "x.safetensors"], ["stats", "x.safetensors", "--json", "-w", "x"], ["stats", "x", "--json", "-w2"],
    ["stats", "x", "--json", "--filter", "a"], ["stats", "x", "--json", "-w", "1", "--workers", "2"],
    ["stats", "x", "--json", "--progress", "--no-progress"], ["stats", "x", "--json", "--csv"], ["stats", "x", "--json", "-w=2"],
    ["stats", "x", "y", "--json"], ["tensors", "x.safetensors", "--json"],
    ["summary", "x.safetensors", "--json", "--verify"], ["sumary", "--json"], ["model", "--json"],
    ["--json", "a.safetensors", "b.safetensors"], ["--json", "x.safetensors", "--config"],
    ["--json", "x.safetensors", "--config", "a", "--config", "b"], ["--json=1", "x.safetensors"],
    ["--json", "--", "x.safetensors"], ["--allow-external", "--json", "x.safetensors"],
])
def test_other_lines_go_to_typer(line):
    assert quick._parse(line) is None


def test_stats_progress_flags(monkeypatch):
    # a TTY's default bar, and --progress / --no-progress over it, as the typer command decides
    from ckptstat.render import progress as bar
    seen = []
    real = bar.progress_bar
    monkeypatch.setattr(bar, "progress_bar", lambda enabled, *a: (seen.append(enabled), real(False))[1])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    st = fixture("bert-tiny", "model.safetensors")
    for flags in ([], ["--progress"], ["--no-progress"]):
        assert quick.quick(["stats", st, "--json", *flags]) == 0
    assert seen == [True, True]   # no bar, and no rich imported, for --no-progress


def test_stats_defaults_are_the_commands():
    from ckptstat.commands import values
    assert (values.ChunkOpt.default, values.WorkersOpt.default) == (quick.STATS_CHUNK, quick.STATS_WORKERS)


@pytest.mark.parametrize("command,table", [("summary", quick._SUMMARY), ("stats", quick._STATS)])
def test_the_quick_options_are_the_commands(command, table):
    # each spelling the quick path parses is one of the typer command's options, of the same kind (a flag, an int,
    # a string), and the spellings _SAME joins are one option: the command function's typer declarations are the oracle
    import inspect
    import typing

    import typer

    from ckptstat import cli
    from ckptstat.commands import values
    function = {"summary": cli.summary, "stats": values.stats}[command]
    kind, option, hints = {}, {}, typing.get_type_hints(function)
    for p in inspect.signature(function).parameters.values():
        if isinstance(p.default, typer.models.OptionInfo):
            for decl in p.default.param_decls:
                for name in decl.split("/"):
                    hint = hints[p.name]
                    kind[name] = next(t for t in typing.get_args(hint) or (hint,) if t is not type(None))
                    option[name] = p.name
    flags, valued = table
    for name in flags:
        assert kind[name] is bool, name
    for name, expected in valued.items():
        assert kind[name] is expected, name
    for spelling, name in quick._SAME.items():
        if spelling in {*flags, *valued}:
            assert option[spelling] == option[name]


def test_hook_modules_match_the_registered_hooks():
    """Each file name's hook module registers that hook (imported here: _load_all leaves out orbax, which only a
    hook loads; before, the test passed only after another test had imported it)."""
    import importlib

    registry._load_all()
    for module in registry._HOOK_MODULES.values():
        importlib.import_module(f"ckptstat.formats.{module}")
    assert set(registry._HOOK_MODULES) == set(registry._FILE_HOOKS)


def _imported_after_run(argv: list[str]) -> str:
    """The heavy libraries and the reader modules a console-script run of `argv` imported (last stderr line)."""
    code = ("import sys; sys.argv = ['ckptstat', " + ", ".join(map(repr, argv)) + "]\n"
            "import os\n"
            "def _exit(rc):\n    raise SystemExit(rc)\n"
            "os._exit = _exit   # run() leaves by os._exit once answered: see what it imported first\n"
            "from ckptstat.__main__ import run\n"
            "try:\n    run()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "heavy = ('typer', 'click', 'pydantic', 'rich', 'numpy', 'torch', 'h5py', 'matplotlib', 'transformers')\n"
            "from ckptstat.formats.registry import _MODULES\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)),"
            " [m for m in _MODULES if 'ckptstat.formats.' + m in sys.modules], file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr
    return r.stderr.strip().splitlines()[-1]


def test_summary_json_loads_no_framework():
    """What issue 22 deferred stays deferred: `ckptstat PATH --json` on a safetensors file imports
    neither typer, click, pydantic, rich nor numpy, and of the readers only safetensors'."""
    assert _imported_after_run(["--json", fixture("bert-tiny", "model.safetensors")]) == "[] ['safetensors']"


def test_stats_json_without_a_bar_loads_no_framework():
    # numpy does the work; rich only draws a progress bar, and a run whose stderr is no terminal draws none
    st = fixture("bert-tiny", "model.safetensors")
    assert _imported_after_run(["stats", st, "--json", "-w", "2"]) == "['numpy'] ['safetensors']"


def test_typer_lines_load_no_pydantic():
    """A line the quick path leaves to typer (human output) imports typer and rich, never pydantic: typer 0.29
    coerces every non-flag parameter through a pydantic TypeAdapter (~0.2 s a command, bench/results/
    cli_start.md), so pyproject caps typer below 0.29."""
    st = fixture("bert-tiny", "model.safetensors")
    for argv in (["summary", st], ["stats", st, "--no-progress", "-w", "1"], ["flops", fixture("bert-tiny")]):
        heavy = _imported_after_run(argv).split("]")[0]
        assert "'typer'" in heavy and "'pydantic'" not in heavy, (argv, heavy)


# --- the shortcuts issue 22's per-name passes take, each resting on a property of a rule table ---------

def test_every_tf_spelling_rule_has_a_literal():
    from ckptstat.families.framework.infer import _TF_LITERALS, _TF_SPELLINGS
    for rx, _ in _TF_SPELLINGS:
        assert any(lit in rx.pattern.replace("\\", "") for lit in _TF_LITERALS), rx.pattern


def test_every_structural_tie_rule_has_a_literal():
    from ckptstat.naming.layout_ties import _STRUCTURAL_LITERALS, STACK_TIE_RULES, STRUCTURAL_TIE_RULES
    for present, *_ in [*STRUCTURAL_TIE_RULES, *STACK_TIE_RULES]:
        assert any(lit in present.pattern.replace("\\", "") for lit in _STRUCTURAL_LITERALS), present.pattern


def test_every_left_out_role_name_holds_a_literal():
    # one name per alternative of each optimizer / counter rule of naming.ROLE_RULES
    from ckptstat.families.framework.infer import _LEFT_OUT_LITERALS
    from ckptstat.naming import ROLE_RULES, role_of
    names = ["optimizer.state.0", "optim.x", "opt_state.x", "optimizer_state_dict.x", "optimizer_states.x", "a.exp_avg",
             "a.exp_avg_sq", "a.max_exp_avg_sq", "a.momentum_buffer", "bert/x/adam_m", "bert/x/adam_v",
             "x/.OPTIMIZER_SLOT/y", "optimizer_weights/x", "global_step", "save_counter", "a.epoch", "iteration",
             "num_updates", "step", "_CHECKPOINTABLE_OBJECT_GRAPH", "a/.OBJECT_GRAPH/b",
             # PaddlePaddle's optimizer accumulators and LR scheduler (a .pdopt)
             "linear_0.w_0_moment1_0", "linear_0.w_0_moment2_0", "linear_0.w_0_beta1_pow_acc_0",
             "linear_0.w_0_beta2_pow_acc_0", "linear_0.w_0_velocity_0", "linear_0.w_0_moment_0",
             "linear_0.w_0_mean_square_0", "linear_0.w_0_mean_grad_0", "LR_Scheduler.last_epoch", "master_weights.w_0"]
    # every word of those rules' alternatives (read from the patterns) is in some name above: a new alternative
    # fails here until a name of it is added, and so checked for a literal below
    words = {w for rx, role in ROLE_RULES if role in ("optimizer", "counter") for w in re.findall(r"[A-Za-z_]{3,}", rx.pattern)}
    assert words and all(any(w in n for n in names) for w in words), sorted(w for w in words if not any(w in n for n in names))
    for n in names:
        assert role_of(n) in ("optimizer", "counter"), n
        assert any(lit in n for lit in _LEFT_OUT_LITERALS), n


@pytest.fixture(params=[None, 1, 7])
def name_slices(request, monkeypatch):
    """The name passes' slice size (naming.SLICE_NAMES): the default, and slices of 1 and 7 names, so that a
    checkpoint's dtypes and ranks part between slices (the keys' tags are decided over all names)."""
    from ckptstat import naming
    if request.param:
        monkeypatch.setattr(naming, "SLICE_NAMES", request.param)   # read by naming.joined_slices at each call
    return request.param


def test_joined_name_scans_equal_the_per_name_rules(name_slices):
    import random

    from ckptstat.families import _COMPONENT_NUMBER, _name_shapes
    from ckptstat.families.framework.infer import canonical_name, canonical_tensors
    from ckptstat.naming import Placement, classify, classify_all, digit_forms, normalize
    rng = random.Random(0)
    parts = ["layer", "layers", "h", "0", "12", "007", "attn", "kernel", "gamma", "bert", "tf_bert_model", "layer_3",
             "mlm___cls", "embeddings", "word_embeddings", "weight", "bias", "exp_avg", "step", "a/b", "x:0", "layer_._2",
             "batch_normalization", "vars", "2", "decoder", "block", "experts", "w1", ".ATTRIBUTES/VARIABLE_VALUE", "", "1a",
             "ln_1"]
    names = sorted({".".join(rng.choice(parts) for _ in range(rng.randint(1, 6))) for _ in range(3000)})
    assert _name_shapes(names) == {_COMPONENT_NUMBER.sub("0", normalize(n)) for n in names}
    odd = names + ["h.\u0663.x", "h.\u00b2.x", "\u0664", "7", "x.8", "a//b.3/c"]   # re's \d: decimal digits, not superscripts
    assert _name_shapes(odd) == {_COMPONENT_NUMBER.sub("0", normalize(n)) for n in odd}
    # the same from the names' digit forms (the literal checks, the leading-number substitution's gate)
    plain = [n for n in names if ":" not in n and "_._" not in n and "ATTRIBUTES" not in n]
    for sample in (names, odd, plain, [n for n in plain if not n[:1].isdigit()], ["3.a", "b.4"], []):
        want = {_COMPONENT_NUMBER.sub("0", normalize(n)) for n in sample} if sample else set()
        assert _name_shapes(sample, digit_forms(sample)) == want
    # the masked fast path, and the name-by-name one (a `#`, a non-ASCII digit: re's \d matches it)
    for extra in ([], ["layers.#.x", "h.\u0663.attn.weight"], ["layers.\u0663.mlp.2.weight", "layers.1.mlp.\u0664.weight"]):
        sample = names + extra
        shapes = {n: (rng.choice(["F32", "I64"]), tuple(rng.choice([(3, 4), (2, 2, 2, 2), (5,)]))) for n in sample}
        got = classify_all((n, d, s) for n, (d, s) in shapes.items())
        want = {n: classify(n, d, s) for n, (d, s) in shapes.items()}
        if not any(p.bucket == "encoder" and p.layer is not None for p in want.values()):
            want = {k: Placement("encoder", p.layer, p.role) if p.bucket == "decoder" else p for k, p in want.items()}
        assert got == want
    from ckptstat.core import TensorInfo
    for sample in (names, [n for n in names if "/" not in n and ":" not in n and "kernel" not in n][:50], ["a.b", "c.0.d"]):
        tensors = {n: TensorInfo(n, "F32", (3, 4), "f", 0, 48) for n in sample}
        kept = [n for n in sample if classify(n, "F32", (3, 4)).role not in ("optimizer", "counter")]
        expected = {}
        for n in kept:
            expected.setdefault(canonical_name(n), n)
        for canon in (canonical_tensors(tensors), canonical_tensors(tensors, None, digit_forms(sample))):
            assert {k: t.name for k, t in canon.items()} == expected


def test_digit_forms_answer_every_literal_pre_check_as_the_names_do(name_slices):
    """Each pre-check of a rule's literals scans the names' digit forms (few lines) instead of all names: exact
    for a literal holding no digit; `:0` (tf_spelled's) may match a form where no name holds it, and the names
    then decide."""
    import random

    from ckptstat.census.quant import _LAYOUT_LITERALS as QUANT
    from ckptstat.core import TensorInfo
    from ckptstat.families.framework.infer import _LEFT_OUT_LITERALS, _REWRITE_LITERALS, tf_spelled
    from ckptstat.naming import digit_forms
    from ckptstat.naming.layout_ties import _STRUCTURAL_LITERALS, structural_ties
    literals = QUANT + _LEFT_OUT_LITERALS + _REWRITE_LITERALS + _STRUCTURAL_LITERALS + ("_._", ":", "ATTRIBUTES")
    assert not any(c.isdigit() for lit in literals for c in lit)
    rng = random.Random(1)
    parts = ["12", "0", "a1b", "qweight", "step", "x:0", "x:3", "cls.predictions.bias", "shared", "weight", "_blocks",
             "layer_._4", "output_bias", "mlm___cls", "é", "٣", "kernel", "9_scale", "opt_state", "tf"]
    for _ in range(200):
        names = list({".".join(rng.choice(parts) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(0, 30))})
        forms = digit_forms(names)
        assert forms is not None and len(forms.split("\n")) <= max(len(names), 1)
        for lit in literals:
            assert (lit in forms) == any(lit in n for n in names), lit
        tensors = {n: TensorInfo(n, "F32", (2,), "f", 0, 8) for n in names}
        assert tf_spelled(tensors, forms) == tf_spelled(tensors)
        assert structural_ties(names, forms) == structural_ties(names)
    assert digit_forms(["a.1", "b\n2"]) is None and digit_forms([]) == ""


def test_find_over_joined_names_equals_a_scan():
    from ckptstat.core import TensorInfo
    from ckptstat.families.framework.infer import NameIndex, find
    names = ["bert.embeddings.word_embeddings.weight", "x.lm_head.weight", "lm_head.weight", "cls.aa.aa", ".dot",
             "a\\.b", "classifier.out_proj.weight"]
    idx = NameIndex({n: TensorInfo(n, "F32", (1,), "f", 0, 4) for n in names})
    for pattern in (r"(^|\.)lm_head\.weight$", r"^lm_head\.weight$", r"(?:^|\.)aa\.(aa)$", r"(^|\.)(aa)\.\2$",
                    r"(^|\.)?lm_head", r"(^|\.){2}dot", r"^\.dot", r"(^|\.)classifier(\.out_proj)?\.weight$", r"(^|\.)nothing$"):
        want = next((n for n in names if re.search(pattern, n)), None)
        got = find(idx, pattern)
        assert (got.name if got else None) == want, pattern


def test_every_layout_rule_has_a_literal():
    from ckptstat.naming.layout_ties import _LAYOUT_LITERALS, LAYOUT_RULES
    for rx, _ in LAYOUT_RULES:
        assert any(lit in rx.pattern.replace("\\", "") for lit in _LAYOUT_LITERALS), rx.pattern


def test_no_signature_reads_a_numbered_component():
    """families.detect matches name shapes with whole numbered components read as 0."""
    import re

    from ckptstat.families import FAMILIES
    for f in FAMILIES:
        for signature in (f.signature, *f.signature_together):
            assert not re.search(r"(\[\./\]|\\\.|/|\^)\d", signature), (f.name, signature)


def test_canonical_and_find_shortcuts_agree_with_the_plain_rules():
    import re

    from ckptstat.core import TensorInfo
    from ckptstat.families.framework import infer
    from ckptstat.naming import normalize

    names = ["bert/encoder/layer_3/attention/self/query/kernel:0", "tf_bert_model/bert/embeddings/word_embeddings",
             "model.layers.0.self_attn.q_proj.weight", "cls/predictions/output_bias", "a\nlm_head.weight",
             "lm_head.weight", "x.layer_1.gamma", "encoder.layer.0.beta", "mlm___cls/predictions/bias:0"]

    def slow(name: str) -> str:
        n = normalize(name)
        if "___" in n:
            parts = n.split(".")
            n = ".".join([p.rsplit("___", 1)[-1] for p in parts[:-1]] + parts[-1:])
        for rx, repl in infer._TF_SPELLINGS:
            n = rx.sub(repl, n)
        return n

    for n in names:
        assert infer.canonical_name(n) == slow(n), n
    for subset in (names, [n for n in names if "\n" not in n]):   # a name with a newline: the plain scan
        t = {n: TensorInfo(n, "F32", (2, 2), "f", 0, 16) for n in subset}
        index = infer.NameIndex(t)
        for pattern in [r"lm_head\.weight$", r"^lm_head", r"(^|\.)layer\.(\d+)\.", r"weight$", r"query",
                        r"[^x]lm_head", r"(?<!a)lm_head", r"\Alm_head", r"s[\s\S]*bias", "nothing"]:
            plain = next((t[n] for n in t if re.search(pattern, n)), None)
            assert infer.find(index, pattern) is plain, pattern


def test_lazy_detection_picks_what_the_full_registry_picks():
    """formats/registry.py imports reader modules only as far as detection needs: in a fresh
    interpreter each file's format is the one the fully loaded registry picks first."""
    from conftest import FIXTURES

    files = ["bert-tiny/model.safetensors", "torch/dtypes.pt", "torch/dtypes-legacy.pt", "keras3/model.weights.h5",
             "keras3-zip/mlp.keras", "gguf/llama-tiny-q.gguf", "onnx/dtypes.onnx", "numpy/embedding.npy",
             "numpy/bert-layer.npz", "tf1-bert/model.ckpt-0.index"]
    paths = [os.path.join(FIXTURES, f) for f in files if os.path.exists(os.path.join(FIXTURES, f))]
    code = ("import sys; from ckptstat.formats import registry\n"
            "lazy = [registry.detect(p).name for p in sys.argv[1:]]\n"
            "registry._load_all()\n"
            "full = [next(f.name for f in registry.FORMATS if f.accept(registry.Probe.of(p))) for p in sys.argv[1:]]\n"
            "print(lazy == full, lazy, full)")
    r = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("True"), r.stdout


def test_format_order_does_not_depend_on_what_imports_a_reader_first():
    # analysis/scan/ imports numpy_npy's and torch's helpers, so their formats may register before safetensors':
    # the registry keeps _MODULES order all the same (the first format that accepts a file is always the same)
    code = ("import sys\nif sys.argv[1] == 'scan': import ckptstat.analysis.scan\n"
            "from ckptstat.formats import registry\nlist(registry._formats_in_order())\n"
            "print([f.name for f in registry.FORMATS])")
    orders = {subprocess.run([sys.executable, "-c", code, first], capture_output=True, text=True, check=True,
                             timeout=120).stdout for first in ("scan", "registry")}
    assert len(orders) == 1 and "safetensors" in orders.pop()
