"""Whole pickled objects (torch.save(model): a tutorial's `torch.save(model, path)`, ultralytics' YOLO `.pt`, a
transformers model saved whole) read with --pickled-objects, every class an inert record, nothing imported or called
(formats/torch/pickled_objects.py, docs/torch.md "Pickled models").

Oracle: torch itself. torch.load(weights_only=False) gives the objects back (this module's classes importable here,
never by ckptstat); each nn.Module's `state_dict()` is what the reader must list under the key the module was saved
at: the same names in the same order, shapes, dtypes and values. Without the switch the file is refused, as
torch.load(weights_only=True) refuses it; with it, every call a pickle makes outside the allowlist is still refused."""
from __future__ import annotations

import json
import os
import pickle
import types
import zipfile

import numpy as np
import pytest
import torch
from module_zoo import Block, Shared
from torch import nn

from ckptstat import CorruptCheckpointError, UnsafeCheckpointError, open_checkpoint
from ckptstat.core.switches import switched


@pytest.fixture
def objects():
    with switched(pickled_objects=True):
        yield


# ---------------------------------------------------------------------------------------------- what users save whole
def _zoo() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), Block(), Shared(), nn.LSTM(4, 3, 2),
                         nn.GRU(3, 2, bidirectional=True), nn.MultiheadAttention(4, 2),
                         nn.TransformerEncoderLayer(8, 2, 16), nn.ModuleDict({"out": nn.Linear(2, 1)}),
                         # hooks pickled with their objects: weight_norm's `weight` a plain attribute, spectral_norm's
                         # u and v buffers; DataParallel's `module.` prefix
                         nn.utils.weight_norm(nn.Linear(3, 2)), nn.utils.spectral_norm(nn.Linear(3, 2)),
                         nn.DataParallel(nn.Linear(2, 2)), nn.Flatten(), nn.CrossEntropyLoss(weight=torch.ones(3)))


class IterableSimpleNamespace(types.SimpleNamespace):
    """ultralytics' args class: a SimpleNamespace, pickled as REDUCE of the class with no arguments, then BUILD."""


class Detect(nn.Module):
    """ultralytics' detection head keeps `stride` as a plain tensor attribute, in no state_dict."""

    def __init__(self) -> None:
        super().__init__()
        self.cv = nn.ModuleList(nn.Conv2d(8, 5, 1) for _ in range(2))
        self.stride = torch.tensor([8.0, 16.0])
        self.nc = 1


class DetectionModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.SiLU(), Detect())
        self.yaml = {"nc": 1, "scales": {"n": [0.33, 0.25, 1024]}}
        self.names = {0: "person"}
        self.args = IterableSimpleNamespace(imgsz=640, task="detect")


def _yolo() -> dict[str, object]:
    """ultralytics' checkpoint layout (engine/trainer.py save_model): the model half precision, args as a dict."""
    model = DetectionModel().half()
    return {"date": "2026-11-28T10:00:00", "version": "8.3.0", "license": "AGPL-3.0", "epoch": -1,
            "best_fitness": None, "model": model, "ema": None, "updates": None, "optimizer": None,
            "train_args": {"model": "yolov8n.yaml", "epochs": 100, "lr0": 0.01},
            "args": IterableSimpleNamespace(lr0=0.01, epochs=100)}


def _training() -> dict[str, object]:
    """A training script's checkpoint with the model saved whole beside its optimizer's state_dict and an EMA model."""
    model = _zoo()
    opt = torch.optim.AdamW(model.parameters())
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    return {"model": model, "ema": _zoo(), "optimizer": opt.state_dict(), "epoch": 3}


CASES = {"module": _zoo, "training": _training, "yolo": _yolo}


def _save(tmp_path, name: str, protocol: int = 2, legacy: bool = False) -> str:
    path = str(tmp_path / f"{name}-{protocol}{'-legacy' if legacy else ''}.pt")
    torch.save(CASES[name](), path, pickle_protocol=protocol, _use_new_zipfile_serialization=not legacy)
    return path


def _expected(obj: object, prefix: str = "") -> dict[str, torch.Tensor]:
    """The tensors torch.load gives back, as the user reaches them: a module's through its state_dict(), a plain
    container's through its keys."""
    if isinstance(obj, nn.Module):
        return {f"{prefix}{k}": v for k, v in obj.state_dict(keep_vars=True).items()}
    if isinstance(obj, torch.Tensor):
        return {prefix[:-1]: obj}
    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_expected(v, f"{prefix}{k}."))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(_expected(v, f"{prefix}{i}."))
    return out


def _check_equal(ckpt, want: dict[str, torch.Tensor]) -> None:
    assert list(ckpt.tensors) == list(want)   # state_dict's order
    for n, t in want.items():
        info = ckpt.tensors[n]
        assert info.shape == tuple(t.shape), n
        np.testing.assert_array_equal(ckpt.read(n).reshape(t.shape), t.detach().numpy(), err_msg=n)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("protocol", [1, 2, 4, 5])   # (torch.save cannot write protocol 0)
@pytest.mark.parametrize("name", sorted(CASES))
def test_read_as_state_dict_names_what_torch_load_gives_back(tmp_path, objects, name, protocol, legacy):
    path = _save(tmp_path, name, protocol, legacy)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    loaded = torch.load(path, weights_only=False)
    want = _expected(loaded)
    ckpt = open_checkpoint(path)
    _check_equal(ckpt, want)
    # the note lists the classes torch names outside its allowlist
    assert any(n.startswith("--pickled-objects") for n in ckpt.notes), ckpt.notes
    # (torch's lister reads zip files of protocol 2, torch.save's default, only)
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path) if not legacy and protocol == 2 else []
    assert all(g in " ".join(ckpt.notes) for g in unsafe), (unsafe, ckpt.notes)
    # each module's tensors have the role its class gave them: a parameter, or a (persistent) buffer
    assert ckpt.roles == _roles(loaded)
    # tensors outside every state_dict (a non-persistent buffer, a plain attribute) are named nowhere and said so
    stored = len({t.untyped_storage().data_ptr() for t in _all_tensors(loaded)})
    named = len({t.untyped_storage().data_ptr() for t in want.values()})
    if stored > named:
        assert any(f"{stored - named} storage record(s)" in n for n in ckpt.notes), ckpt.notes
    else:
        assert not any("no name listed here reaches" in n for n in ckpt.notes), ckpt.notes


def _roles(loaded: object) -> dict[str, str]:
    """Each module's state_dict names as parameter (named_parameters) or buffer (the rest of its state_dict)."""
    modules = {"": loaded} if isinstance(loaded, nn.Module) else \
        {f"{k}.": v for k, v in loaded.items() if isinstance(v, nn.Module)} if isinstance(loaded, dict) else {}
    out = {}
    for prefix, m in modules.items():
        params = {n for n, _ in m.named_parameters(remove_duplicate=False)}
        out.update({prefix + n: "parameter" if n in params else "buffer" for n in m.state_dict()})
    return out


def _all_tensors(obj: object, seen: set[int] | None = None) -> list[torch.Tensor]:
    """Every tensor an object graph holds, attributes included (what torch.save wrote storages for)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _all_tensors(v, seen)]
    if isinstance(obj, (list, tuple, set)):
        return [t for v in obj for t in _all_tensors(v, seen)]
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return _all_tensors(vars(obj), seen)
    return []


def test_a_yolo_checkpoint_reads_its_model_and_shows_its_args(tmp_path, cli):
    path = _save(tmp_path, "yolo")
    loaded = torch.load(path, weights_only=False)
    rc, out, err = cli("--pickled-objects", "summary", path, "--json")
    assert rc == 0, err
    r = json.loads(out)
    params = sum(p.numel() for p in loaded["model"].parameters())
    assert r["parameters"]["unique"] == params
    assert {d["dtype"] for d in r["dtypes"]} <= {"F16", "I64"}, r["dtypes"]   # the model saved half, counters int64
    args = loaded["args"]
    assert r["objects"]["args.lr0"]["value"] == args.lr0 and r["objects"]["args.epochs"]["value"] == args.epochs
    assert r["metadata"]["version"] == loaded["version"]
    stride = loaded["model"].model[3].stride   # Detect.stride, a plain attribute: .half() left it float32
    assert any(f"1 storage record(s), {stride.nbytes:,} bytes" in n for n in r["notes"]), r["notes"]


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "t5", "qwen3_moe", "mistral", "mixtral", "phi3",
                                    "gemma2", "deepseek_v3", "whisper", "vit"])
def test_a_transformers_model_saved_whole_reads_as_its_state_dict(tmp_path, objects, family):
    """transformers 5 models pickled whole: config objects, GenerationConfig, activation classes and (with the
    `kernels` package) `_rebuild_kernel_func` function modules; parameters counted as model.parameters() counts them,
    a tied head once."""
    transformers = pytest.importorskip("transformers")
    small = dict(n_layer=1, n_embd=32, n_head=2, num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                 num_attention_heads=2, num_key_value_heads=1, vocab_size=100, num_layers=1, d_model=32, d_ff=64,
                 num_heads=2, d_kv=16, num_experts=4, num_local_experts=4, n_routed_experts=4, moe_intermediate_size=16,
                 head_dim=16, bos_token_id=0, eos_token_id=1, pad_token_id=0, decoder_start_token_id=0,
                 encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                 encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=16,
                 max_target_positions=16, image_size=32, patch_size=8, kv_lora_rank=16, q_lora_rank=16,
                 qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, first_k_dense_replace=0, n_group=1,
                 topk_group=1, num_experts_per_tok=2)
    cfg = transformers.AutoConfig.for_model(family)
    for k, v in small.items():
        if hasattr(cfg, k):
            setattr(cfg, k, v)
    if getattr(cfg, "layer_types", None):   # (Gemma 2's per-layer list, one a layer)
        cfg.layer_types = cfg.layer_types[:cfg.num_hidden_layers]
    auto = transformers.AutoModel if family in ("bert", "t5", "whisper", "vit") else transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    model = auto.from_config(cfg)
    path = str(tmp_path / f"{family}.pt")
    torch.save({"model": model, "step": 7}, path)
    loaded = torch.load(path, weights_only=False)
    ckpt = open_checkpoint(path)
    _check_equal(ckpt, _expected(loaded))
    from ckptstat.analysis.summary import summarize

    s = summarize(ckpt)
    assert s["parameters"]["unique"] == sum(p.numel() for p in loaded["model"].parameters())
    # the model's own config, as the config.json save_pretrained writes (its dtype is the weights' at save time, and
    # the reader's keeps the fields left at their defaults, which save_pretrained drops)
    model.save_pretrained(str(tmp_path / "hf"))
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert ckpt.config_from == "model.config of the pickle" and ckpt.config is not None
    assert {k: ckpt.config.get(k) for k in written if k not in ("transformers_version", "dtype")} == \
        {k: v for k, v in written.items() if k not in ("transformers_version", "dtype")}
    assert s["architecture"]["model_type"] == model.config.model_type
    assert s["architecture"]["architectures"] == [type(model).__name__]


# ---------------------------------------------------------------------------------------------- refusals
def test_without_the_switch_the_file_is_refused_saying_how_to_read_it(tmp_path, cli):
    path = _save(tmp_path, "yolo")
    rc, out, err = cli("summary", path)
    assert rc == 1 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "(a pickled object" in err and "--pickled-objects" in err and os.path.basename(path) in err
    rc, out, err = cli("summary", path, "--pickled-objects")   # the switch wherever it stands on the line
    assert rc == 0, err


def _s(b: bytes) -> bytes:   # SHORT_BINUNICODE
    return b"\x8c" + bytes([len(b)]) + b


def _calls(canary: str) -> dict[str, tuple[bytes, str]]:
    """Pickles that call (or build with arguments) what --pickled-objects must still refuse, and the global named."""
    cmd = f"touch {canary}".encode()
    return {
        "os.system": (b"\x80\x02cos\nsystem\n" + _s(cmd) + b"\x85R.", "os.system"),
        "Popen NEWOBJ": (b"\x80\x02csubprocess\nPopen\n(" + _s(b"touch") + _s(canary.encode()) + b"l\x85\x81.",
                         "subprocess.Popen"),
        "Popen NEWOBJ_EX kwargs": (b"\x80\x04" + _s(b"subprocess") + _s(b"Popen") + b"\x93)}" + _s(b"args") + _s(cmd)
                                   + b"s\x92.", "subprocess.Popen"),
        "eval": (b"\x80\x02cbuiltins\neval\n" + _s(b"print(1)") + b"\x85R.", "builtins.eval"),
        "enum value": (b"\x80\x02cmylib\nColor\nK\x01\x85R.", "mylib.Color"),
        "partial with arguments": (b"\x80\x02cfunctools\npartial\ncbuiltins\nexec\n" + _s(cmd) + b"\x86R.",
                                   "functools.partial"),
        "instance then call": (b"\x80\x02}(" + _s(b"m") + b"ctorch.nn\nModule\n)\x81" + _s(b"x")
                               + b"cbuiltins\nexec\n" + _s(cmd) + b"\x85Ru.", "builtins.exec"),
        "reconstructor with a state": (b"\x80\x02ccopyreg\n_reconstructor\ncmylib\nThing\ncbuiltins\nobject\n"
                                       + _s(cmd) + b"\x87R.", "copyreg._reconstructor"),
        "kernel rebuild of a non-name": (b"\x80\x02ckernels._internals.layer.layer\n_rebuild_kernel_func\nK\x01K\x02"
                                         b"\x86R.", "_rebuild_kernel_func"),
    }


@pytest.mark.parametrize("case", sorted(_calls("x")))
def test_calls_are_still_refused_with_the_switch_and_nothing_runs(tmp_path, cli, objects, case):
    canary = str(tmp_path / "PWNED")
    pkl, name = _calls(canary)[case]
    p = tmp_path / "evil.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("evil/data.pkl", pkl)
    rc, out, err = cli("--pickled-objects", "summary", str(p))
    assert rc == 1 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert name in err and "evil.pt" in err
    assert not os.path.exists(canary)
    with pytest.raises((UnsafeCheckpointError, CorruptCheckpointError)):
        open_checkpoint(str(p))


def test_a_module_shared_exponentially_is_refused_in_bounded_work(tmp_path, objects):
    """A module registered twice under each of 60 parents: state_dict would name 2^60 tensors (torch's own hangs);
    each module visit is charged to the pickle's budget, and the reader stops in one line."""
    leaf = nn.Linear(1, 1)
    top: nn.Module = leaf
    for _ in range(60):
        parent = nn.Module()
        parent.a, parent.b = top, top
        top = parent
    path = str(tmp_path / "dag.pt")
    torch.save(top, path)
    with pytest.raises(CorruptCheckpointError, match="pay for"):
        open_checkpoint(path)


def test_a_module_that_holds_itself_is_refused(tmp_path, objects):
    m = nn.Sequential(nn.Linear(2, 2))
    m.add_module("me", m)
    path = str(tmp_path / "cycle.pt")
    torch.save(m, path)
    with pytest.raises(CorruptCheckpointError, match="levels deep"):
        open_checkpoint(path)


def test_scan_still_calls_a_pickled_model_unsafe(tmp_path, cli):
    """Reading is the user's choice; scan's verdict is torch.load's: it imports every class the file names."""
    path = _save(tmp_path, "module")
    rc, out, _ = cli("--pickled-objects", "scan", path, "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unsafe" and "torch.nn.modules.container.Sequential" in r["unsafe_globals"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_audit_reads_pickled_models_with_the_switch_in_its_workers(tmp_path, cli, workers):
    d = tmp_path / "zoo"
    d.mkdir()
    torch.save(CASES["yolo"](), d / "yolo.pt")
    torch.save(CASES["module"](), d / "model.pt")
    out_file = tmp_path / "a.jsonl"
    cli("audit", str(d), "-o", str(out_file), "--workers", workers, "--pickled-objects")
    records = {os.path.basename(r["path"]): r for r in map(json.loads, out_file.read_text().splitlines())}
    for name in ("yolo.pt", "model.pt"):
        loaded = torch.load(d / name, weights_only=False)
        model = loaded["model"] if isinstance(loaded, dict) else loaded
        assert records[name]["error"] is None, records[name]
        assert records[name]["parameters"] == sum(p.numel() for p in model.parameters()), name
        assert records[name]["scan"]["verdict"] == "unsafe"
    out_file.unlink()
    cli("audit", str(d), "-o", str(out_file), "--workers", workers)   # without the switch: an error each, as before
    records = {os.path.basename(r["path"]): r for r in map(json.loads, out_file.read_text().splitlines())}
    assert all("--pickled-objects" in (r["error"] or "") for r in records.values()), records


def test_mutated_model_pickles_read_or_give_one_error(tmp_path, objects):
    """600 seeded mutants of a pickled model's data.pkl: each reads, or ends in a CkptstatError, never another
    exception."""
    from zip_mutants import outcomes

    from ckptstat.analysis.summary import summarize

    seen = outcomes(_save(tmp_path, "yolo"), lambda n: n.endswith("/data.pkl"), 600, 37, str(tmp_path / "m.pt"),
                    lambda p: summarize(open_checkpoint(p)))
    assert set(seen) <= {"read", "CorruptCheckpointError", "UnsafeCheckpointError"} and "read" in seen, seen


def test_a_config_json_beside_a_pickled_model_is_read_instead_of_its_own(tmp_path, objects):
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100))
    torch.save(model, tmp_path / "model.pt")
    assert open_checkpoint(str(tmp_path / "model.pt")).config_from == "config of the pickle"
    model.config.n_positions = 64   # the file's differs from the pickled one
    model.config.save_pretrained(str(tmp_path))
    ckpt = open_checkpoint(str(tmp_path))
    assert ckpt.config_path == str(tmp_path / "config.json") and ckpt.config_from is None
    assert ckpt.config["n_positions"] == 64


def test_config_classes_table_is_what_transformers_declares():
    """formats/config_classes.json (fixtures/make_config_classes.py) against the installed transformers: every class
    of its auto mapping, by the qualified name a pickle names it by, with the model_type the class declares."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from ckptstat.formats.torch.model_config import config_classes

    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ckptstat", "formats",
                           "config_classes.json")) as f:
        assert json.load(f)["transformers"] == transformers.__version__
    table = config_classes()
    for model_type, name in CONFIG_MAPPING_NAMES.items():
        cls = getattr(transformers, name, None)
        if cls is not None:
            assert table[f"{cls.__module__}.{cls.__name__}"] == (cls.model_type or model_type), name
