"""The architecture description the analytic layer works from (base.ArchSpec): from config.json, from
a GGUF file's metadata, or inferred from tensor names and shapes when there is neither; and the
sequence lengths it can run. Each function resolves the family in the registry (families/__init__.py)
and calls what the family module provides; nothing here knows a family by name."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...errors import NoAnalyticModel, UsageError, one_line
from .. import MODEL_TYPES, by_gguf, by_model_type, get, language_model, wrappers
from .archspec import SEQ_UNITS
from .base import DTYPE_BYTES, HEAD_SUFFIXES, ArchSpec, Cfg, Tensors, architectures, config_dtype, head_of
from .infer import canonical_name, canonical_tensors, find, has

__all__ = ["DTYPE_BYTES", "HEAD_SUFFIXES", "ArchSpec", "audio_inputs", "canonical_name", "canonical_tensors", "check_seq",
           "config_from_gguf", "default_seq", "from_config", "from_tensors", "infer_head", "max_seq", "with_head"]


def _labels(cfg: Mapping[str, Any], c: Cfg) -> int:
    id2label = cfg.get("id2label")
    if isinstance(id2label, dict):   # transformers 5 saves num_labels=0 as an empty id2label and no num_labels
        return len(id2label)
    return c.int("num_labels", default=2)


def from_config(cfg: Mapping[str, Any], path: str = "config.json", source: str = "config.json") -> ArchSpec:
    """ArchSpec from a Hugging Face config.json dict (source: what held it, as outputs name it: "config.json",
    "params.json", "GGUF metadata"). Raises UsageError for an unsupported family."""
    mt = cfg.get("model_type")
    wrapped = language_model(cfg)
    if wrapped is not None:   # a vision-language wrapper (wrappers.py)
        inner = wrapped[0]
        spec = replace(from_config(inner, path, source), mrope=wrappers.mrope(cfg))
        return replace(spec, outside=wrappers.VISION_MODULES,
                       assumptions=(wrappers.note(cfg, inner["model_type"]),) + spec.assumptions)
    family = by_model_type(mt, cfg)
    if family is None or not isinstance(mt, str):
        # (not the list of the model types that have one: hundreds, and the line must leave room for what would answer)
        raise NoAnalyticModel(f"{path}: model_type {mt!r} has no analytic model (op templates describe {len(MODEL_TYPES)} "
                              "model types: docs/flops_memory.md)")
    archs = architectures(cfg)
    head, arch_name, notes = head_of(archs, family.default_head)
    if family.encoder_decoder and not family.decoder_alone and arch_name is not None and arch_name.endswith("ForCausalLM"):
        raise NoAnalyticModel(f"{path}: {arch_name} is the {family.name} decoder alone (no encoder, no cross-attention "
                              "input): the encoder-decoder template does not describe it")
    if arch_name is not None and head not in family.heads:   # CLIPForImageClassification
        raise NoAnalyticModel(f"{path}: the {family.name} op template describes the {', '.join(family.heads)} "
                              f"head{'s' if len(family.heads) > 1 else ''}, not {arch_name}'s")
    c = Cfg(cfg, path, mt, head, {})
    c.common = dict(family=family.name, model_type=mt, source=source, head=head, architecture=arch_name,
                    assumptions=notes, num_labels=_labels(cfg, c), dtype=config_dtype(cfg))
    return family.from_config(c)


def infer_head(family: str, T: Tensors) -> tuple[str, str]:
    """(head, evidence: the file's name of the tensor that shows it) from canonical_tensors()."""
    f = get(family)
    for rule in f.head_rules:
        t = find(T, rule.pattern)
        if t is None or (rule.requires is not None and not has(T, rule.requires)):
            continue
        head = rule.otherwise if rule.unless is not None and rule.otherwise and has(T, rule.unless) else rule.head
        return head, t.name
    return f.no_head, "no head tensors"


def from_tensors(family: str, tensors: Tensors, metadata: Mapping[str, str] | None = None) -> ArchSpec:
    """ArchSpec from the shapes of a checkpoint's tensors, for a family already detected from names.
    FLOPs and parameters depend only on shapes; head counts are not recoverable and are assumed.
    Names may be PyTorch, google-research TF1 or HF TF spellings (canonical_tensors)."""
    return from_canonical(family, canonical_tensors(tensors, metadata))


def from_canonical(family: str, T: Tensors, head: str | None = None) -> ArchSpec:
    """from_tensors over names canonical_tensors() already gave (census.resolve computes them, and the
    head, once)."""
    head = head or infer_head(family, T)[0]
    try:
        spec = get(family).from_tensors(T, dict(family=family, model_type=family, source="tensor names",
                                                architecture=None, head=head))
    except (IndexError, ValueError, ZeroDivisionError) as e:
        # a family's look-ups read the shapes its own files have: a tensor of another rank or an empty one (a hostile
        # or foreign file under the family's names) is an answer of no architecture, not a crash
        raise UsageError(f"cannot infer the {family} architecture from the tensor shapes ({type(e).__name__}: "
                         f"{one_line(str(e))[:200]}); pass --config") from None
    return capped_top_k(spec)


def capped_top_k(spec: ArchSpec) -> ArchSpec:
    """A spec read without config whose assumed experts per token (a released model's, or the config class's default)
    are more than its routers can pick from (a small checkpoint: 8 of 4 experts): top_k that many, said in the
    assumptions. transformers' torch.topk over the router's logits cannot pick more."""
    n = spec.routed_choices
    if not spec.experts or spec.top_k <= n:
        return spec
    why = f"no config: experts per token (top-k) capped at {n}, the experts the shapes show (the assumed {spec.top_k} is more)"
    return replace(spec, top_k=n, assumptions=spec.assumptions + (why,))


def with_head(spec: ArchSpec, head: str) -> ArchSpec:
    return replace(spec, head=head, pooler=get(spec.family).pooler(spec.model_type, head))


def config_from_gguf(metadata: Mapping[str, str], tensors: Tensors) -> dict | None:
    """A config.json equivalent from a GGUF file's metadata, or None for an architecture without one."""
    arch = metadata.get("general.architecture")
    if not arch:
        return None
    f = by_gguf(arch, metadata)
    if f is None or f.gguf_config is None:
        return None
    return f.gguf_config(arch, metadata, tensors)


def max_seq(spec: ArchSpec) -> int | None:
    """Longest sequence the learned absolute position table can index, or None (rotary / relative)."""
    if not spec.positions:
        return None
    return spec.positions - get(spec.family).position_offset.get(spec.model_type, 0)


def default_seq(spec: ArchSpec) -> int:
    """The sequence length commands use when none is given: 128, or fewer if the model cannot run 128."""
    limit = max_seq(spec)
    return 128 if limit is None else min(128, limit)


def check_seq(spec: ArchSpec, seq: int, dec_seq: int | None = None) -> None:
    """UsageError when a sequence length exceeds the model's learned positions, or is shorter than its family's
    min_seq (the model cannot run it)."""
    shortest = get(spec.family).min_seq
    if shortest is not None and seq < shortest(spec):
        raise UsageError(f"--seq {seq} is shorter than the {shortest(spec):,} {SEQ_UNITS[spec.seq_unit]} {spec.model_type} needs")
    limit = max_seq(spec)
    if limit is None:
        return
    # --dec-seq only matters to a model with a decoder stack (T5's has relative positions, no table).
    for flag, n in (("--seq", seq), ("--dec-seq", dec_seq if spec.decoder_layers else None)):
        if n is not None and n > limit:
            extra = f" ({spec.positions} rows, the first {spec.positions - limit} reserved by the padding offset)" \
                if limit != spec.positions else ""
            raise UsageError(f"{flag} {n} exceeds the model's {limit} learned positions{extra}")


FRAMES_PER_SECOND = 100   # Whisper's feature extractor: hop 160 samples at 16 kHz


def audio_encoder(spec: ArchSpec) -> bool:
    """Whether the model's encoder reads mel frames (Whisper), its length --frames' (audio_inputs)."""
    family = get(spec.family)
    return family.main_input == "input_features" and family.seq2seq(spec)   # WhisperForCausalLM reads token ids


def image_encoder(spec: ArchSpec) -> bool:
    """Whether the model reads images alone (ViT, ResNet...): one forward per image, whatever --seq says."""
    return get(spec.family).main_input == "pixel_values"


def image_fields(spec: ArchSpec) -> dict[str, object]:
    """What a flops or memory report of a model that reads images alone adds (`input`: "image", `image_size`): its
    figures are per image, whatever the `seq` the analytic run carries; {} for any other model."""
    return {"input": "image", "image_size": spec.image_size} if spec.image_size and image_encoder(spec) else {}


def audio_inputs(spec: ArchSpec, seqs: list[int], dec_seq: int | None, frames: int | None = None,
                 audio_seconds: float | None = None, dec_flag: str = "--dec-seq") -> tuple[list[int], int | None]:
    """(encoder lengths, decoder length) for `flops`/`memory`. A model whose main input is audio
    (Family.main_input "input_features") counts its encoder input in mel frames: --frames, or
    --audio-seconds x 100, or --seq; by default 2 x max_source_positions (3000 = 30 s), the one length
    transformers' Whisper accepts; its decoder defaults to 128 tokens or max_target_positions if fewer.
    Other models: seqs and dec_seq unchanged, and --frames / --audio-seconds are a usage error."""
    if frames is not None and audio_seconds is not None:
        raise UsageError("give --frames or --audio-seconds, not both")
    if not audio_encoder(spec):
        if frames is not None or audio_seconds is not None:
            reads = "images (use --image-size)" if image_encoder(spec) else "token ids (use --seq)"
            raise UsageError(f"--frames / --audio-seconds apply to audio models; {spec.family} reads {reads}")
        return seqs, dec_seq
    if audio_seconds is not None:
        if not audio_seconds > 0:
            raise UsageError(f"--audio-seconds must be positive, got {audio_seconds}")
        frames = max(1, round(audio_seconds * FRAMES_PER_SECOND))
    limit = 2 * spec.source_positions
    out = [frames] if frames is not None else seqs or [limit]
    for n in out:
        if n > limit:
            raise UsageError(f"{n} mel frames exceed the encoder's {limit} (2 x max_source_positions, "
                             f"{limit / FRAMES_PER_SECOND:g} s)")
    dec_limit = spec.target_positions
    if dec_seq is not None and dec_seq > dec_limit:
        raise UsageError(f"{dec_flag} {dec_seq} exceeds the decoder's {dec_limit} learned positions")
    return out, min(128, dec_limit) if dec_seq is None else dec_seq
