import importlib.util
import json
import os
import sys
from types import ModuleType

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")


def held_bytes(tensors) -> int:
    """The memory tensors hold, as torch allocated it: each distinct storage's bytes once. A view keeps its base's
    whole storage (transformers' DynamicSlidingWindowLayer keeps a view of the last window - 1 tokens of all a
    forward's states); two views of one storage are one allocation."""
    storages = {}
    for t in tensors:
        storage = t.untyped_storage()
        storages[storage._cdata] = storage.nbytes()
    return sum(storages.values())


def saved_split(model, forward) -> tuple[int, int]:
    """(bytes autograd saves inside the decoder layers, bytes it saves elsewhere) over `forward()`, one training
    forward of `model`: each storage once, at its whole size (views of one storage keep all of it alive), parameters
    and buffers not counted, nor the storages `forward` returns (autocast's weight casts); a storage is the layers' when
    first saved while a module under `layers.N` / `h.N` / `blocks.N` (DBRX) runs, but what every layer is handed
    besides its hidden states (the rotary table's cos and sin, a mask the model builds once, Falcon-RW's ALiBi bias)
    is elsewhere."""
    import re

    import torch

    layer = re.compile(r"\.(layers|layer|h|blocks)\.\d+(\.|$)")
    owned = [*model.parameters(), *model.buffers()]   # held to the end: a buffer the forward replaces (CTRL's
    skip = {p.untyped_storage().data_ptr() for p in owned}   # pos_encoding) frees a pointer another storage may take
    stack, hooks, outside = ["top"], [], set()

    def handed(m, args, kwargs):   # a layer's arguments besides its hidden states
        flat = torch.utils._pytree.tree_flatten((args[1:], {k: v for k, v in kwargs.items() if k != "hidden_states"}))[0]
        outside.update(t.untyped_storage().data_ptr() for t in flat if isinstance(t, torch.Tensor))

    for name, mod in model.named_modules():
        hooks.append(mod.register_forward_pre_hook(lambda m, a, n=name: stack.append(n)))
        hooks.append(mod.register_forward_hook(lambda m, a, o: (stack.pop(), None)[1]))
        if layer.search(name) and name.rsplit(".", 1)[1].isdigit():
            hooks.append(mod.register_forward_pre_hook(handed, with_kwargs=True))
    seen: dict[int, tuple[int, bool]] = {}
    kept = []   # every tensor saved, alive to the end: a storage freed meanwhile would give its pointer to another

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip and st.data_ptr() not in seen:
            seen[st.data_ptr()] = (st.nbytes(), bool(layer.search(stack[-1])))
            kept.append(t)
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            excluded = forward() or set()
    finally:
        for h in hooks:
            h.remove()
    counted = {ptr: v for ptr, v in seen.items() if ptr not in excluded}
    layers = sum(nb for ptr, (nb, inside) in counted.items() if inside and ptr not in outside)
    return layers, sum(nb for nb, _ in counted.values()) - layers


def fixture(*parts: str) -> str:
    return os.path.join(FIXTURES, *parts)


def fixture_script(name: str) -> ModuleType:
    """A writer script of fixtures/ (make_zoo, make_quantized...) as a module, loaded by its path: fixtures/
    never goes on sys.path, where its folders (onnx/, torch/, flax/, gguf/, numpy/) would import as namespace
    packages and let `pytest.importorskip("onnx")` pass without onnx."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, fixture(name + ".py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


SAFETENSORS_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def sparse_safetensors(path, tensors: dict, prefix: str = "") -> None:
    """A safetensors file of these tensors ({name: (dtype, shape)}, names under `prefix`) whose data region is a hole:
    a 32B model in its header."""
    import struct

    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = SAFETENSORS_SIZES[dtype]
        for d in shape:
            n *= d
        header[prefix + name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)


def ldm_vae(tmp_path):
    """The 1.x single-file fixture's VAE alone in LDM's names (its state, the file written) and the AutoencoderKL
    diffusers' `from_single_file` loads from it (with the tiny VAE's config)."""
    from diffusers import AutoencoderKL
    from safetensors.torch import load_file, save_file

    state = {k[len("first_stage_model."):]: v for k, v in load_file(fixture("single_file/sd15.safetensors")).items()
             if k.startswith("first_stage_model.")}
    path = str(tmp_path / "vae-ft-mse.safetensors")
    save_file(state, path)
    config = tmp_path / "vae-config"
    fixture_script("make_single_file")._vae().save_pretrained(str(config))
    return state, path, AutoencoderKL.from_single_file(path, config=str(config), local_files_only=True)


@pytest.fixture(scope="session")
def expected_st() -> dict:
    with open(fixture("expected_safetensors.json")) as f:
        return json.load(f)


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""
    from ckptstat.cli import main

    def run(*args: str):
        rc = main(list(args))
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def pytest_configure(config):
    """An xdist worker computes on one thread (OpenMP, OpenBLAS, MKL), and so do the processes it starts: the workers
    already fill the cores, and torch's OpenMP threads spin-waiting beside the other worker's cost CPU time the suite
    does not have (test_families' FlopCounterMode forwards: 128 s -> 46 s on two cores, docs/testing.md). Set before
    a test module imports torch, which reads it when its thread pool starts."""
    if hasattr(config, "workerinput"):
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = "1"
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)


# The modules of most test time (a --durations=0 profile of the whole suite, 2026-12-06: 18-52 s each of 1,074 s),
# collected first: xdist's loadscope hands modules out in collection order, so the longest start first and the last
# ones to finish are short (alphabetical order left several of these for the end, one core idle meanwhile).
LONGEST_FIRST = ("test_remote", "test_meta", "test_families", "test_dask_cluster", "test_hostile_corpus",
                 "test_reader_contract", "test_remote_values", "test_fuzz_readers", "test_deepseek_v4", "test_hostile_skips",
                 "test_jsontext", "test_scan_zip_elsewhere", "test_fuzz_readers_more", "test_audit_remote",
                 "test_remote_policy", "test_saved_table", "test_memory_planner", "test_coverage_walk")


def pytest_collection_modifyitems(config, items):
    """The transformers 5 gaps not yet fixed (tests/known_gaps.py): xfail, with the reason, not hidden. The modules
    of LONGEST_FIRST collected first, in its order (each module's tests in theirs)."""
    from known_gaps import GAPS

    for item in items:
        reason = GAPS.get(item.nodeid)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=False))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))   # (stable: the rest keep their order)


def pytest_sessionfinish(session):
    """Each test process's oracle figures (tests/oracle_figures.py): kept in record mode, counted for the summary."""
    import oracle_figures

    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    oracle_figures.write_records(worker)
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["oracle_figures"] = dict(oracle_figures.counts)


@pytest.hookimpl(optionalhook=True)   # an xdist hook
def pytest_testnodedown(node, error):
    """An xdist worker's figure counts, added to the controller's."""
    import oracle_figures

    oracle_figures.counts.update(getattr(node, "workeroutput", {}).get("oracle_figures", {}))


def pytest_terminal_summary(terminalreporter):
    import oracle_figures

    c = oracle_figures.counts
    if c:
        line = (f"oracle figures: {c['read'] + c['checked']} read from tests/oracles (written by {oracle_figures.installed()}), "
                f"{c['checked']} of them computed again and equal, {c['live'] + c['missing']} computed live")
        if c["missing"]:
            line += f" ({c['missing']} not on record: python scripts/record_oracles.py)"
        terminalreporter.write_line(line)
