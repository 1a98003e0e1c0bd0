"""Every registered model family against transformers builds of it. Each family module carries samples
(base.Sample: a config class with tiny sizes and the model classes to build, one or more per head the
family models); for every sample model:

* the parameters its op template predicts from the config equal sum(p.numel() for p in model.parameters());
* its matmul FLOPs equal what torch.utils.flop_counter.FlopCounterMode counts on an eager forward;
* its tensor-name signature detects it, and inference from the tensor shapes alone (no config) finds
  the same head and parameter count.

A family without samples, or with a head or model_type no sample builds, fails here: a new family
inherits these tests from its registry line. Models are built on torch's meta device (no memory, no
compute) unless a sample needs real values."""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import math
import re
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
import census_audit  # noqa: E402
from census_audit import saved_shapes  # noqa: E402
from conftest import held_bytes  # noqa: E402
from oracle_figures import Kind, Later  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import ckptstat  # noqa: E402
from ckptstat.analysis import meta, torch_flops  # noqa: E402
from ckptstat.census.model import load as load_model  # noqa: E402
from ckptstat.core import TensorInfo  # noqa: E402
from ckptstat.errors import NoAnalyticModel, UsageError  # noqa: E402
from ckptstat.families import FAMILIES, by_model_type, detect, generic  # noqa: E402
from ckptstat.families.framework.base import Family, Sample  # noqa: E402
from ckptstat.families.framework.graph import build, predict_params  # noqa: E402
from ckptstat.families.framework.layout import layouts_of  # noqa: E402
from ckptstat.families.framework.spec import from_config, from_tensors  # noqa: E402

SEQS = (8, 16)
# raw samples a waveform encoder (ArchSpec.seq_unit "samples") reads past the shortest it runs (its family's min_seq,
# checked too: 400 for wav2vec2's kernels and strides), odd and even
AUDIO_SAMPLES = (1001, 1601, 4000)
BATCH = 2


# ---- the torch oracle (also used by tests/test_flops.py) ----

@contextlib.contextmanager
def meta_autocast():
    """transformers' rotary embedding opens torch.autocast(device_type=x.device.type), which has no
    meta backend; on meta there is nothing to autocast, so make it a no-op there."""
    real = torch.autocast

    def patched(device_type, *a, **k):
        return contextlib.nullcontext() if device_type == "meta" else real(device_type, *a, **k)

    torch.autocast = patched
    try:
        yield
    finally:
        torch.autocast = real


def on(device):
    """torch.device(device) as the default for new tensors; on the CPU, the default already, nothing: the device mode
    intercepts every torch call of the forward (14-30% of these CPU forwards' time, measured 2026-12-05)."""
    return contextlib.nullcontext() if device == "cpu" else torch.device(device)


def meta_model(cls, cfg, device="meta"):
    """The model with eager attention: on meta (shapes only), or with real tiny weights on the CPU."""
    if device == "meta":
        with torch.device("meta"):   # eval: BART/Whisper draw a layerdrop number in training mode (.item() on meta)
            return cls._from_config(cfg, attn_implementation="eager").eval()
    torch.manual_seed(0)
    # no parameter requires grad: FlopCounterMode's module tracker hooks the grad of a module's inputs, and a slice of a
    # weight passed to a module (DBRX's experts) would be one that requires grad with no grad_fn under no_grad
    return cls._from_config(cfg, attn_implementation="eager").eval().requires_grad_(False)


# FLOPs of aten._grouped_mm (transformers 5's MoE experts), for which FlopCounterMode has no formula: the product's
# one rule (ckptstat/analysis/torch_flops.py grouped_mm_flops, rows offs[-1] of the real forward), and its FlopCounterMode
flop_counter = meta.flop_counter


def fcm_flops(model, seq, batch=1, device="meta", encdec=None, main_input="input_ids", frames=0):
    """FlopCounterMode's total for one forward of `batch` x `seq` tokens (decoder tokens too when the
    model takes decoder_input_ids). main_input "input_features": the encoder reads `frames` mel frames
    and `seq` is the decoder's length. A *ForMultipleChoice reads one example of `batch` choices, [1, batch, seq] (the
    op templates' batch counts the batch x num_choices sequences)."""
    if encdec is None:
        encdec = "decoder_input_ids" in inspect.signature(model.forward).parameters
    # no parameter asks for a gradient: FlopCounterMode's module tracker hooks every input that does, and a weight
    # viewed under no_grad (transformers 5.25's causal_conv1d fallback module) has no grad_fn for it to hook
    model.requires_grad_(False)
    with flop_counter() as counter, meta_autocast(), on(device), torch.no_grad():
        shape = (1, batch, seq) if type(model).__name__.endswith("ForMultipleChoice") else (batch, seq)
        ids = torch.arange(batch * seq).reshape(shape) % model.config.get_text_config().vocab_size
        kw = {"decoder_input_ids": ids} if encdec else {}
        if main_input == "input_features":
            model(input_features=torch.zeros((batch, model.config.num_mel_bins, frames)), **kw)
        else:
            # transformers 5 builds the mask with data-dependent checks (.item(), no meta kernel): on meta, no
            # mask (all ones changes no matmul)
            mask = {} if device == "meta" else {"attention_mask": torch.ones(shape, dtype=torch.long)}
            model(input_ids=ids, **mask, **kw)
    return counter.get_total_flops()


def fcm_image_flops(model, seq, batch, device, side, channels, native):
    """FlopCounterMode's total for one forward of `batch` side x side images (and `seq` tokens of text
    when the model also reads input_ids, as CLIPModel does); positions interpolated off the config's size."""
    params = inspect.signature(model.forward).parameters
    # CLIPForImageClassification's forward hands its **kwargs to its vision tower, whose forward names the switch
    tower = getattr(model, "vision_model", None)
    takes = "interpolate_pos_encoding" in params or tower is not None and any(
        p.kind is p.VAR_KEYWORD for p in params.values()) and "interpolate_pos_encoding" in inspect.signature(
        tower.forward).parameters
    with FlopCounterMode(display=False) as counter, on(device), torch.no_grad():
        kw = {"pixel_values": torch.zeros((batch, channels, side, side))}
        if takes and side != native:
            kw["interpolate_pos_encoding"] = True
        if "input_ids" in params:
            kw["input_ids"] = torch.arange(batch * seq).reshape(batch, seq) % model.config.text_config.vocab_size
        model(**kw)
    return counter.get_total_flops()


def refuses_side(spec):
    """Whether the template refuses spec.image_size (UsageError)."""
    try:
        ours(spec, 1, 1)
    except UsageError:
        return True
    return False


def fcm_audio_flops(model, samples, batch, device):
    """FlopCounterMode's total for one forward of `batch` waveforms of `samples` raw samples (input_values), without
    an attention mask, as tests/coverage_walk.py's oracle runs it."""
    with flop_counter() as counter, on(device), torch.no_grad():
        model(input_values=torch.zeros((batch, samples)))
    return counter.get_total_flops()


def spec_of(cls, cfg):
    """ckptstat's ArchSpec from the config.json save_pretrained would write for `cls`."""
    d = cfg.to_dict()
    d["architectures"] = [cls.__name__]
    return from_config(d)


def ours(spec, seq, batch=1, dec_seq=None):
    """Matmul FLOPs of the family's op template."""
    return sum(2 * op.macs * op.calls for op in build(spec, batch, seq, dec_seq))


def tensor_infos(model) -> dict[str, TensorInfo]:
    """The model's parameters as a checkpoint's headers would list them: each storage once, under the
    name save_pretrained keeps (tied copies dropped); shapes only."""
    return {n: TensorInfo(n, "F32", shape, "model.safetensors", None, 4 * math.prod(shape), storage=n)
            for n, shape in saved_shapes(model, tied=False).items()}


# ---- the oracle's figures, kept (tests/oracle_figures.py): keyed by the sample's config, the model class, the device
# and the inputs; a figure on record builds no model ----

def shapes_digest(shapes: dict) -> str:
    """A digest of names and shapes (what the table keeps of a model's saved shapes: their equality, not their 3 MB)."""
    return hashlib.sha1(json.dumps(sorted((n, list(s)) for n, s in shapes.items())).encode()).hexdigest()


SAVED = Kind(__name__, "saved_shapes_digest", meta_model, shapes_digest, census_audit)


def sample_key(sample: Sample, model_name: str) -> list:
    return [sample.config, sample.kwargs, model_name]


def config_changes(sample: Sample, model_name: str) -> dict:
    """What the model's __init__ changes in the config it is given (BigBird's and MRA's QA heads set num_labels to 2),
    which save_pretrained then writes."""
    cfg = _config(sample)
    before = cfg.to_dict()
    meta_model(getattr(T, model_name), cfg)
    return {k: v for k, v in cfg.to_dict().items() if k not in before or before[k] != v}


CONFIG = Kind(__name__, "config_changes", meta_model, config_changes)


def saved_spec(sample: Sample, model_name: str):
    """ckptstat's ArchSpec from the config.json save_pretrained writes for the sample's model (as its __init__ leaves
    the config), without building the model where its changes are on record."""
    d = _config(sample).to_dict()
    d.update(CONFIG(sample_key(sample, model_name), config_changes, sample, model_name))
    d["architectures"] = [model_name]
    return from_config(d)


def image_flops_or_failure(model, seq, batch, device, side, channels, native):
    """fcm_image_flops, or None where the library fails at that side (a RuntimeError)."""
    try:
        return fcm_image_flops(model, seq, batch, device, side, channels, native)
    except RuntimeError:
        return None


FLOPS = Kind(__name__, "flops", meta_model, fcm_flops, fcm_image_flops, image_flops_or_failure, fcm_audio_flops,
             meta_autocast, on, torch_flops)


# ---- the registry walk ----

CASES = [pytest.param(f, sample, name, id=f"{f.name}-{name}" + (f"-{i}" if i else ""))
         for f in FAMILIES for i, sample in enumerate(f.samples) for name in sample.models]


def _config(sample: Sample):
    return getattr(T, sample.config)(**sample.kwargs)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_family_samples_cover_its_heads_and_model_types(family: Family):
    assert family.samples, f"{family.name}: no Sample to check it against transformers (families/{family.name}.py)"
    heads = {spec_of(getattr(T, name), _config(s)).head for s in family.samples for name in s.models}
    assert set(family.heads) <= heads, f"{family.name}: heads without a sample model: {set(family.heads) - heads}"
    model_types = {getattr(T, s.config).model_type for s in family.samples}
    assert model_types == set(family.model_types), f"{family.name}: model_types without a sample config"


def test_registry_names_and_model_types_are_unique():
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names))
    model_types = [mt for f in FAMILIES for mt in f.model_types]
    assert len(model_types) == len(set(model_types))


# The oracle's forwards run on the CPU with the sample's tiny weights: FlopCounterMode counts the same aten ops there as
# on meta, which runs them through torch's Python reference implementations, 2-3x slower than a tiny CPU kernel. A
# sample whose init fails off the meta device stays there (xLSTM's fused gates: families/xlstm.py).
ON_META = {"xlstm-xLSTMModel-1"}


@pytest.mark.parametrize("family,sample,model_name", CASES)
def test_params_and_matmul_flops_equal_transformers(family: Family, sample: Sample, model_name: str, request):
    cfg = _config(sample)
    cls = getattr(T, model_name)
    device = "meta" if request.node.callspec.id in ON_META else "cpu"
    model = meta_model(cls, cfg)   # the parameters and the names; the forwards' model only for a figure not on record
    run = Later(meta_model, cls, cfg, device)
    key = [*sample_key(sample, model_name), device, BATCH]
    spec = spec_of(cls, cfg)
    assert spec.family == family.name
    torch_params = sum(p.numel() for p in model.parameters())
    assert predict_params(spec)["total"] == torch_params
    if spec.seq_unit == "samples":   # a waveform encoder (input_values): --seq counts raw samples, at several counts
        assert family.min_seq is not None
        shortest = family.min_seq(spec)
        for n in (shortest, *(x for x in AUDIO_SAMPLES if x > shortest)):
            expected = FLOPS([*key, "samples", n], fcm_audio_flops, run, n, BATCH, device)
            assert expected > 0
            assert ours(spec, n, BATCH) == expected, n
    # an attention the template refuses by name (Family.flops_refused): its parameters above, no FLOPs
    refused = family.flops_refused(spec) if family.flops_refused is not None else None
    if refused:
        with pytest.raises(NoAnalyticModel, match=re.escape(refused)):
            ours(spec, SEQS[0], BATCH)
    takes = inspect.signature(model.forward).parameters
    for seq in SEQS if spec.seq_unit == "tokens" and not refused else ():
        # vision: at two image sides (Fuyu's template is its text-only forward: no image_size), and at two text
        # lengths only where the model also reads text (CLIPModel)
        if spec.image_size and "pixel_values" in takes:
            if seq != SEQS[0] and "input_ids" not in takes:
                continue
            image = getattr(spec.variant, "vision", spec.variant)   # a two-tower model's vision tower (clip.Towers)
            for side in (spec.image_size, spec.image_size * 3 // 2 + 1):
                native = getattr(image, "native_image_size", None)
                expected = FLOPS([*key, "image", seq, side, image.channels, native], image_flops_or_failure,
                                 run, seq, BATCH, device, side, image.channels, native)
                if side != spec.image_size and refuses_side(replace(spec, image_size=side)):
                    # a side the walk refuses (PVT's position tables, reshaped into the grid): the library fails too
                    assert expected is None
                    continue
                assert expected is not None and expected > 0
                assert ours(replace(spec, image_size=side), seq, BATCH) == expected, (seq, side)
            continue
        if "input_features" in takes:   # audio: the config fixes the frames,
            # seq is the decoder's
            frames = 2 * cfg.max_source_positions
            expected = FLOPS([*key, "features", seq, frames], fcm_flops, run, seq, BATCH, device,
                             main_input=family.main_input, frames=frames)
            assert ours(spec, frames, BATCH, dec_seq=seq) == expected, seq
            continue
        expected = FLOPS([*key, "tokens", seq], fcm_flops, run, seq, BATCH, device)
        assert expected > 0
        assert ours(spec, seq, BATCH) == expected, seq

    # Without a config: the name signature finds the family, the shapes its head and parameters.
    tensors = tensor_infos(model)
    assert detect(tensors, None).family == (sample.detected_as or family.name)
    if not sample.infer or sample.detected_as:
        return
    inferred = from_tensors(family.name, tensors)
    assert inferred.head == spec.head
    assert predict_params(inferred)["total"] == torch_params


# ---- routed experts: what users run by default, and torch's own count of it ----

def _experts_module(f: Family) -> bool:
    """Whether the family's experts are one of transformers 5's experts implementations (not Llama 4's, which runs
    every expert as one bmm: DecoderLayout.every_expert; nor those a modeling file loops over itself, DBRX's flat
    experts and JetMoE's JetMoeParallelExperts: DecoderLayout.flat_experts, moa)."""
    ls = layouts_of(f)
    return ls is None or not any(lay.every_expert or lay.flat_experts or lay.moa for lay in ls.by_type.values())


MOE_CASES = [c for c in CASES if c.values[1].kwargs.get("num_experts_per_tok") and _experts_module(c.values[0])]


@pytest.mark.parametrize("family,sample,model_name", MOE_CASES)
def test_grouped_mm_counts_what_the_eager_experts_loop_counts(family: Family, sample: Sample, model_name: str):
    """transformers 5 runs routed experts through grouped_mm unless told otherwise (the implementation the test
    above counts, as users run it); its FLOPs (grouped_mm_flops) equal what torch's own formulas count on the eager
    experts loop (experts_implementation="eager": one mm per expert hit, on the rows routed to it)."""
    cfg = _config(sample)
    model = Later(meta_model, getattr(T, model_name), cfg, sample.device)
    key = [*sample_key(sample, model_name), sample.device, BATCH]
    default = FLOPS([*key, "tokens", SEQS[0]], default_experts_flops, model, SEQS[0], BATCH, sample.device)
    assert default == EAGER([*key, SEQS[0]], eager_experts_flops, model, SEQS[0], BATCH) > 0


def default_experts_flops(model, seq, batch, device):
    """fcm_flops of the experts implementation transformers 5 runs by default, grouped_mm."""
    assert model.config._experts_implementation == "grouped_mm"
    return fcm_flops(model, seq, batch, device)


def eager_experts_flops(model, seq, batch):
    """What FlopCounterMode's own formulas count with the eager experts loop (no formula of ckptstat's)."""
    model.set_experts_implementation("eager")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        ids = torch.arange(batch * seq).reshape(batch, seq) % model.config.vocab_size
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return counter.get_total_flops()


EAGER = Kind(__name__, "eager_experts_flops", meta_model, eager_experts_flops)


@pytest.mark.parametrize("family,sample,model_name", MOE_CASES)
def test_fused_experts_of_a_torch_save_are_found_and_counted(family: Family, sample: Sample, model_name: str):
    """transformers 5 holds the experts fused (mlp.experts.gate_up_proj / down_proj, 3-D): a torch.save of the
    model's state_dict keeps them so, where save_pretrained writes one tensor per expert. Without a config, the
    names still show the family and the shapes give model.parameters()."""
    cls = getattr(T, model_name)
    with torch.device("meta"):
        model = cls._from_config(_config(sample))
    first: dict[int, str] = {}   # a tied weight: one storage under two names, as torch.save's file aliases it
    names = {n: TensorInfo(n, "F32", tuple(t.shape), "pytorch_model.bin", None, 4 * t.numel(),
                           storage=first.setdefault(id(t), n))
             for n, t in model.state_dict(keep_vars=True).items()}
    names = {n: t for n, t in names.items() if t.storage == n}
    # under mlp (GraniteMoE's under block_sparse_moe, Jamba's and LFM2-MoE's under feed_forward; NemotronH's plain
    # experts under mixer, up_proj alone)
    assert any(n.endswith((".experts.gate_up_proj", ".experts.up_proj")) for n in names)
    # the in-memory names may show the family where save_pretrained's do not (MiniCPM 5 MoE's q_gate_proj)
    shown = any(re.search(family.signature, n) for n in names)
    assert detect(names, None).family == (family.name if shown else sample.detected_as or family.name)
    if sample.infer:
        assert predict_params(from_tensors(family.name, names))["total"] == sum(p.numel() for p in model.parameters())


# ---- the expected-tensor template (`ckptstat ties`' config cross-check) ----

TEMPLATE_CASES = [c for c in CASES if c.values[0].expected_tensors is not None]


@pytest.mark.parametrize("family,sample,model_name", TEMPLATE_CASES)
def test_expected_tensors_are_the_models_named_parameters(family: Family, sample: Sample, model_name: str):
    """Every parameter name and shape the model has (tied names included), as save_pretrained writes them
    (transformers 5 reverts its in-memory renames and fused experts to the original layout), and nothing
    else, for every family with a template and every head its samples build."""
    assert family.expected_tensors is not None
    assert_saved_shapes(family.expected_tensors(saved_spec(sample, model_name)), sample, model_name)


def assert_saved_shapes(expected: dict, sample: Sample, model_name: str) -> None:
    """expected == saved_shapes of the sample's model (tied names included), through the digest on record."""

    def model_shapes():
        return saved_shapes(meta_model(getattr(T, model_name), _config(sample)))

    if shapes_digest(expected) != SAVED(sample_key(sample, model_name), lambda: shapes_digest(model_shapes())):
        assert expected == model_shapes()   # what differs, from the model itself
        pytest.fail("tests/oracles/test_families.json disagrees with the model: python scripts/record_oracles.py")


def test_every_family_has_a_template():
    assert [f.name for f in FAMILIES if f.expected_tensors is None] == []


@pytest.mark.parametrize("config,model_name", [
    ("XLMRobertaConfig", "XLMRobertaForMaskedLM"), ("BertConfig", "BertForMaskedLM"),
    ("BartConfig", "BartForConditionalGeneration"), ("CLIPTextConfig", "CLIPTextModel"),
    ("DebertaConfig", "DebertaForMaskedLM"), ("DebertaV2Config", "DebertaV2ForMaskedLM")])
def test_tensor_infos_are_what_save_pretrained_writes(tmp_path, config, model_name):
    """The registry walk's stand-in for a file (tensor_infos: saved_shapes, tied False) holds the names and shapes a
    real save_pretrained writes, tied groups under the name it keeps (XLM-R registers its MLM head before `roberta`:
    the kept name is still the embedding's)."""
    from safetensors import safe_open

    sample = next(s for f in FAMILIES for s in f.samples if s.config == config and model_name in s.models)
    torch.manual_seed(0)
    model = getattr(T, model_name)(_config(sample))
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        written = {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}
    buffers = {n for n, _ in model.named_buffers()}
    assert {n: t.shape for n, t in tensor_infos(model).items()} == {n: s for n, s in written.items() if n not in buffers}


# ---- KV cache: the bytes transformers' cache holds after a forward ----

# every registered decoder with a KV cache, each sample's causal LM, an encoder-decoder's decoder alone included
# (encoder-decoders' self and cross caches: tests/test_encdec_audio_ssm.py; sliding windows beyond these samples:
# tests/test_kv_sliding.py)
KV_CASES = [pytest.param(f, sample, name, id=f"{f.name}-{name}" + (f"-{i}" if i else ""))
            for f in FAMILIES if f.kv_cache is not None and (not f.encoder_decoder or f.decoder_alone)
            for i, sample in enumerate(f.samples) for name in sample.models
            if name.endswith("ForCausalLM") or (name.endswith("LMHeadModel") and not f.encoder_decoder)]


def cache_bytes(model, seq, batch):
    """Bytes the model's cache holds after one forward of batch x seq tokens (conftest.held_bytes): each layer's keys and
    values (and a sparse-attention indexer's keys: DynamicIndexedLayer's indexer_keys), and a state-space layer's conv
    and recurrent states (transformers 5's LinearAttentionLayer; Mamba returns its cache as cache_params)."""
    with torch.no_grad():
        ids = torch.arange(batch * seq).reshape(batch, seq) % model.config.get_text_config().vocab_size
        out = model(input_ids=ids, use_cache=True)
    if getattr(out, "state", None) is not None:   # RWKV: its state, five tensors, in place of a cache
        return held_bytes(out.state)
    if hasattr(getattr(out, "cache", None), "rnn_state"):   # xLSTM: its xLSTMCache, per layer C, n and m
        return held_bytes([t for states in out.cache.rnn_state.values() for t in states])
    # transformers 5.x renames past_key_values to `cache` (ZAYA's output)
    cache = next((c for k in ("past_key_values", "cache_params", "cache") if (c := getattr(out, k, None)) is not None), None)
    if cache is None:   # a BERT-like's causal LM built as an encoder (is_decoder false): no cache
        return 0
    cache = getattr(cache, "self_attention_cache", cache)   # GPTBigCode returns an EncoderDecoderCache
    tensors = []
    for layer in cache.layers:
        tensors += [t for k in ("keys", "values", "indexer_keys") if (t := getattr(layer, k, None)) is not None
                    and not (k == "values" and t is layer.keys)]   # DeepSeek-V4's compressed layers: K = V, one tensor
        # LFM2's conv layers: no recurrent state; DeepSeek-V4's compressor states: per name (compressor, indexer) the
        # compressed entries, the unclosed window, the last window
        for kind in ("conv_states", "recurrent_states", *meta.COMPRESSOR_STATES):
            tensors += [t for t in (getattr(layer, kind, None) or {}).values() if t is not None]
    tensors += meta.outside_layers(cache)   # MiniMax's lightning states
    return held_bytes(tensors)


CACHE = Kind(__name__, "cache_bytes", meta_model, cache_bytes, held_bytes, meta)


@pytest.mark.parametrize("family,sample,model_name", KV_CASES)
def test_kv_cache_bytes_equal_transformers_cache(family: Family, sample: Sample, model_name: str):
    cfg = _config(sample)
    cls = getattr(T, model_name)
    model = Later(meta_model, cls, cfg, "cpu")
    spec = saved_spec(sample, model_name)
    assert family.kv_cache is not None
    for seq in (2, 8, 16):   # below and above the samples' sliding windows (4)
        ours_bytes = sum(x for _, x, _ in family.kv_cache(spec, BATCH, seq, seq, 4)[:1])
        assert ours_bytes == CACHE([*sample_key(sample, model_name), seq, BATCH], cache_bytes, model, seq, BATCH), seq


# ---- the generic decoder fallback (families/generic.py) ----

def _generic_spec(cls, cfg, model_type="my_decoder"):
    d = cfg.to_dict()
    d.update(architectures=[cls.__name__], model_type=model_type)
    return from_config(d)


GENERIC_CASES = [
    pytest.param(s, name, "my_decoder", id=f"renamed-{s.config}-{name}") for s in generic.FAMILY.samples for name in s.models
] + [
    # a real llama-shaped model under a model_type no family claims (Granite's multipliers are element-wise; `granite`
    # itself is the llama family's now, as llama.cpp's GraniteModel is a LlamaModel)
    pytest.param(Sample("GraniteConfig", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                              intermediate_size=37, vocab_size=99, embedding_multiplier=2.0,
                                              residual_multiplier=0.5, logits_scaling=4.0),
                        ("GraniteForCausalLM",)), "GraniteForCausalLM", "my_granite", id="granite"),
]


@pytest.mark.parametrize("sample,model_name,model_type", GENERIC_CASES)
def test_generic_fallback_params_and_flops_equal_transformers(sample: Sample, model_name: str, model_type: str):
    assert by_model_type(model_type) is None, f"{model_type} has a family module now: pick another generic case"
    cfg = _config(sample)
    cls = getattr(T, model_name)
    model = meta_model(cls, cfg, sample.device)
    spec = _generic_spec(cls, cfg, model_type)
    assert spec.family == "generic"
    assert any(a.startswith("generic (config fields)") and "hidden_size" in a for a in spec.assumptions)
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
    for seq in SEQS:
        assert ours(spec, seq, BATCH) == fcm_flops(model, seq, BATCH, sample.device), seq


def test_generic_fallback_needs_the_standard_fields():
    d = T.LlamaConfig(**dict(generic._SIZES)).to_dict()
    d["model_type"] = "my_decoder"
    del d["intermediate_size"]
    assert by_model_type("my_decoder", d) is None
    assert detect([], d).family == "unknown"
    with pytest.raises(UsageError, match="has no analytic model"):
        from_config(d)


def _save(tmp_path, model, model_type):
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["model_type"] = model_type
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_generic_fallback_from_a_saved_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(**generic._SIZES))
    path = _save(tmp_path, model, "my_decoder")
    m = load_model(str(path))
    assert m.spec.family == "generic" and m.agree
    assert m.checkpoint_params == sum(p.numel() for p in model.parameters())
    assert any("generic (config fields)" in n for n in m.notes)


def test_generic_fallback_refuses_flops_when_the_shapes_disagree(tmp_path):
    """ZAYA has the standard fields but convolutions in its attention, its own router MLP and residual scaling: saved
    under a model_type no family has, the LLaMA-shaped template predicts another parameter count, so no FLOPs are
    given (families/zaya.py describes it under its own)."""
    torch.manual_seed(0)
    model = T.ZayaForCausalLM(T.ZayaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, intermediate_size=37, vocab_size=99))
    path = _save(tmp_path, model, "my_zaya")
    assert by_model_type("my_zaya") is None
    with pytest.raises(UsageError, match="disagree with the template"):
        load_model(str(path))
    assert "disagree with the template" in ckptstat.summarize(str(path))["analytic"]["error"]


def test_qwen2_5_configs_load_as_qwen2():
    """Qwen2.5 ships model_type qwen2 (Qwen2.5-0.5B's config.json fields: GQA 14/2, tied embeddings, a
    sliding_window it does not use): llama.py's qwen2 rules, parameters as transformers builds them."""
    qwen25 = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  vocab_size=151936, max_position_embeddings=32768, max_window_layers=24, rope_theta=1000000.0,
                  sliding_window=32768, use_sliding_window=False, tie_word_embeddings=True, torch_dtype="bfloat16")
    cfg = T.Qwen2Config(**qwen25)
    model = meta_model(T.Qwen2ForCausalLM, cfg)
    spec = spec_of(T.Qwen2ForCausalLM, cfg)
    assert (spec.family, spec.model_type, spec.sliding_window) == ("llama", "qwen2", None)
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
