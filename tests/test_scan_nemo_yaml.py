"""The YAML reader of `ckptstat scan`'s NeMo rules (analysis/scan/yaml_lite.py) against PyYAML read as OmegaConf.load
reads it, and the target rules (analysis/scan/nemo_config.py).

PyYAML is no ckptstat dependency; the test install holds it (huggingface_hub, transformers). The oracle loader is
OmegaConf's (omegaconf/_utils.py get_yaml_loader, omegaconf 2.3: SafeLoader, its own float resolver added, the
timestamp resolver dropped, duplicate keys refused), rebuilt here because omegaconf is not installed. The property the
scan relies on: whenever both read a text, they read the same tree; the reader refuses (Unreadable) what it cannot
read with certainty, and never reads a key or a string otherwise than PyYAML."""
from __future__ import annotations

import os
import re
import string
import tarfile

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptstat.analysis.scan.nemo_config import classify, judge_config
from ckptstat.analysis.scan.yaml_lite import Entry, Unreadable, entries

yaml = pytest.importorskip("yaml")


class _OmegaConfLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            if key_node.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError("duplicate key")
                keys.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


_OmegaConfLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"""^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))
_OmegaConfLoader.yaml_implicit_resolvers = {k: [(t, r) for t, r in v if t != "tag:yaml.org,2002:timestamp"]
                                            for k, v in _OmegaConfLoader.yaml_implicit_resolvers.items()}


def _pyyaml(text: str) -> object:
    try:
        return yaml.load(text, Loader=_OmegaConfLoader)
    except Exception:  # noqa: BLE001 - any error: OmegaConf.load raises, nothing is built
        return _RAISES


_RAISES = object()


def _tree(node: object, path: tuple = ()) -> list[tuple[tuple, object]]:
    """PyYAML's document as (path, value) in document order, as the reader yields its entries."""
    out: list[tuple[tuple, object]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        out.append(((*path, k), v))
        out += _tree(v, (*path, k))
    return out


def same(text: str) -> str:
    """"same", "unreadable" or "pyyaml raises" (both fine for scan), else what differs."""
    expected = _pyyaml(text)
    try:
        mine = list(entries(text))
    except Unreadable:
        return "unreadable"
    if expected is _RAISES:
        return "pyyaml raises"
    if expected is None and not mine:
        return "same"
    if not isinstance(expected, (dict, list)):
        return f"a scalar document {expected!r}"
    tree = _tree(expected)
    if len(tree) != len(mine):
        return f"{len(tree)} nodes, the reader {len(mine)}"
    for (path, value), e in zip(tree, mine):
        if len(path) != len(e.path) or any(
                a != b if isinstance(a, str) or isinstance(b, int) else
                isinstance(b, str) and Entry((), b, "plain", b, True, 0).is_string for a, b in zip(path, e.path)):
            return f"path {path} read as {e.path}"
        kind = "map" if isinstance(value, dict) else "seq" if isinstance(value, list) else "null" if value is None \
            else "scalar"
        if kind in ("map", "seq") or e.style in ("map", "seq"):
            if kind != e.style:
                return f"{path}: {kind}, the reader {e.style}"
        elif kind == "null" and e.style == "null":
            continue
        elif e.style == "null" or e.is_string != isinstance(value, str):
            return f"{path}: {value!r}, the reader {e}"
        elif e.exact and e.is_string and value != e.text:
            return f"{path}: {value!r}, the reader {e.text!r}"
    return "same"


_ALPHABET = string.ascii_letters + string.digits + "_ .:-#'\"{}[],&*!|>?%@`~=\\/$\n\u2581\u00e9"
_scalars = st.one_of(
    st.text(alphabet=string.ascii_lowercase + "._", min_size=1, max_size=12),
    st.sampled_from([1, 0, -3, 1.5, 1e-3, True, False, None, "yes", "1e5", "0x1f", "null", "~", "", "1:20", "no"]),
    st.text(alphabet=_ALPHABET, max_size=30),
    st.lists(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8), min_size=1, max_size=20).map(" ".join))
_keys = st.one_of(st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=10), _scalars)
_trees = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                         st.dictionaries(_keys, inner, max_size=5)), max_leaves=25)
_styles = st.fixed_dictionaries({"default_flow_style": st.sampled_from([False, None, True]),
                                 "width": st.sampled_from([20, 80, 1000]), "allow_unicode": st.booleans(),
                                 "indent": st.sampled_from([2, 4])})


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_trees, style=_styles)
def test_the_reader_reads_what_pyyaml_dumps_as_pyyaml_reads_it(tree, style):
    text = yaml.dump({"root": tree}, sort_keys=False, **style)
    assert same(text) in ("same", "unreadable"), (same(text), text)


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_trees, style=_styles, edits=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(
    ["", " ", "  ", "\n", ": ", "- ", "#", " #", "'", '"', "{", "[", "}", "]", ",", "&a ", "*a", "!!str ", "<<: ",
     "? ", "|", ">-", "\n  ", "\t", "\\", "${x}", "---\n"])), min_size=1, max_size=4))
def test_whenever_both_read_a_mutated_text_they_agree(tree, style, edits):
    text = yaml.dump({"root": tree}, sort_keys=False, **style)
    for at, piece in edits:
        at %= max(len(text), 1)
        text = text[:at] + piece + text[at + (1 if piece == "" else 0):]
    assert same(text) in ("same", "unreadable", "pyyaml raises"), (same(text), text)


def test_a_comment_right_after_a_flow_indicator():
    """PyYAML takes `#` at a token's start for a comment, with no space before it (`{#x: 1}`): so does the reader
    (a random sweep found it: the reader had read `#oot` as a key)."""
    for text in ("{#oot:\n _}\n", "a: [1,#c\n 2]\n", "{a: 1,#_target_: os.system\n b: 2}\n"):
        assert same(text) in ("same", "unreadable"), (same(text), text)


def _fixture_configs() -> dict[str, str]:
    out = {}
    for name in sorted(os.listdir(os.path.join(FIXTURES, "nemo"))):
        with tarfile.open(os.path.join(FIXTURES, "nemo", name)) as tar:
            member = tar.extractfile("./model_config.yaml")
            assert member is not None
            out[name] = member.read().decode("utf-8")
    return out


def test_every_config_omegaconf_saved_reads_exactly():
    """The configs make_nemo.py wrote with OmegaConf.save (and the payloads appended to them by hand) read exactly as
    PyYAML reads them, but for the constructs the reader refuses by design."""
    refused = {"config-alias.nemo", "config-merge.nemo", "config-tag.nemo"}
    for name, text in _fixture_configs().items():
        assert same(text) == ("unreadable" if name in refused else "same"), name


@pytest.mark.parametrize("text", [
    "a: &x 1\nb: *x\n", "a: !!python/object:os.system x\n", "b: {<<: {c: 1}}\n", "<<: {c: 1}\n", "? a\n: b\n",
    "%YAML 1.1\n---\na: 1\n", "a: 1\n---\nb: 2\n", "a:\n\tb: 1\n", '"\\x5ftarget\\x5f": os.system\n',
    "a: 1\u2028_target_: os.system\n", "a: 1\x85b: 2\n", "a: b: c\n", "a: [1, 2\n", "a:\n  - 1\n - 2\n",
    "k" * 1025 + ": 1\n", "a: |\n    x\n  _target_: os.system\n",
])
def test_what_the_reader_cannot_read_with_certainty_is_unreadable(text):
    with pytest.raises(Unreadable):
        list(entries(text))


def test_targets_are_judged_by_their_package():
    assert classify("_target_", "os.system")[0] == "unsafe"
    assert classify("_target_", "builtins.exec")[0] == "unsafe"
    assert classify("cls", "subprocess.Popen")[0] == "unsafe"
    assert classify("target", "posix.system")[0] == "unsafe"
    assert classify("_target_", "torch.hub.load")[0] == "unsafe"
    assert classify("_target_", "torch.load")[0] == "unsafe"
    assert classify("_target_", "torch.loader")[0] == "suspicious"      # (a prefix of a name is not the name)
    for known in ("nemo.collections.asr.modules.ConformerEncoder", "torch.optim.AdamW", "megatron.core.ModelParallelConfig",
                  "lightning.pytorch.callbacks.ModelCheckpoint", "torchmetrics.audio.SignalDistortionRatio",
                  "nemo_text_processing.text_normalization.normalize.Normalizer"):
        assert classify("_target_", known) is None, known
    assert classify("_target_", "evil.Model")[0] == "suspicious"
    assert classify("_target_", "nemo")[0] == "suspicious"      # (a bare package is no NeMo module path)
    assert classify("target", "os") is None                    # import_class_by_path of one part imports nothing
    assert classify("_target_", "os")[0] == "unsafe"           # hydra imports a module alone
    assert classify("_target_", "os..system") is None          # hydra refuses an empty part before importing


def test_interpolations_that_build_or_hide_targets_are_unknown():
    ok = judge_config("a: 1\nb: ${a}\nc: ${oc.env:HOME}\nd: ${..a}\ne: ${multiply:2,${a}}\n", "c.yaml")
    assert not ok.unknown and not ok.unsafe
    for text in ("p: ${oc.decode:'{_target_: os.system}'}\n", "p: ${eval:'1+1'}\n", "p: ${${a}:x}\n",
                 "p:\n  _target_: ${a}.system\n"):
        v = judge_config(text, "c.yaml")
        assert v.unknown and not v.unsafe, text


def test_targets_are_found_wherever_hydra_and_nemo_look():
    text = ("target: os.system\nlayers:\n- cls: subprocess.run\n  params: {args: [id]}\n"
            "- {'_target_': builtins.eval, _args_: ['1']}\nopt:\n  _target_: \"posix.system\"\n  _partial_: true\n")
    v = judge_config(text, "c.yaml")
    assert [(x.key, x.name, x.where) for x in v.unsafe] == [
        ("target", "os.system", "target"), ("cls", "subprocess.run", "layers[0].cls"),
        ("_target_", "builtins.eval", "layers[1]._target_"), ("_target_", "posix.system", "opt._target_")]
    v = judge_config("a:\n  _target_: 1.5\n  target: true\nb:\n  _target_: {x: 1}\n", "c.yaml")
    assert not v.unsafe and not v.suspicious and not v.unknown    # no string: hydra raises, nothing is imported
