"""Tied weights and counting conventions: why tools report different parameter counts for one model.

Evidence for a tie, each labelled in the output:
  shared storage        two names over one storage and view (PyTorch files)
  safetensors metadata  `__metadata__[dropped] = kept`, as safetensors.torch.save_model records it
  config                the architecture ties the pair when `tie_word_embeddings` is true (and the
                        file lacks the alias, or stores it twice)
  architecture          a pair tied whatever the config says (BERT's decoder bias is the head's bias)
  structural            a head stored without its weight (TF1 BERT's MLM head stores only a bias)
  config.json architectures X
                        the class config.json names ties the pair in transformers (families/tie_table.py)
  identical contents    `--deep`: streamed hashes of two stored tensors are equal
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from operator import methodcaller
from typing import Any

from ..core import Checkpoint, dtypes
from ..errors import CkptstatError
from ..families import by_model_type
from ..families.framework.base import TieRule
from ..families.framework.infer import canonical_name, tf_spelled
from ..families.tie_table import ClassTies, class_ties
from ..families.wrappers import language_config
from ..naming import name_forms
from ..naming.layout_ties import structural_ties
from .counts import aliases
from .quant import logical
from .resolution import resolve

# Heads whose model holds a word-embedding-sized output layer (for tie rules that name no heads).
_LM_HEADS = ("mlm", "lm", "pretraining")


@dataclass(frozen=True)
class Tie:
    alias: str
    target: str
    evidence: str    # one of the labels in the module docstring
    status: str      # "aliased in file" | "absent from file" | "stored twice"
    numel: int
    module: bool = False


def tie_word_embeddings(ckpt: Checkpoint) -> bool | None:
    cfg = ckpt.config
    if not cfg:
        return None
    own = class_ties(cfg)   # the class config.json names: transformers' own rule for it (tie_table.tie_switch)
    if own is not None:
        return own.switch
    # a class the table lacks: a vision-language wrapper's text config (get_text_config), else the top config;
    # transformers' default is True except where a family's config sets False (Family.tied_by_default)
    cfg = language_config(cfg) or cfg
    if "tie_word_embeddings" in cfg:
        return bool(cfg["tie_word_embeddings"])
    family = by_model_type(cfg.get("model_type"))
    return family.tied_by_default if family is not None else True


def _has_head(ckpt: Checkpoint, outer: str, rule: TieRule, head: str | None) -> bool:
    """Does the resolved model have `rule.alias` although the file lacks it? Rules name the heads whose
    model has the alias (ElectraForPreTraining has no generator head); a rule that names none applies
    to an LM-type head, or when the file holds the alias's module."""
    if rule.heads:
        return head in rule.heads
    if head in _LM_HEADS:
        return True
    module = outer + rule.alias.rsplit(".", 2)[0] + "."
    return any(n.startswith(module) for n in ckpt.tensors)


def stored_twice(ckpt: Checkpoint) -> frozenset[str]:
    """The names of ties transformers makes on load that the file stores again, separately (the class's tie groups
    where config.json names a class the tie table lists, else the family's rules), with equal copies: each pair loads
    as one parameter, so the census counts the copy as it counts an alias, once (its bytes stay in the file's)."""
    return ckpt.derived("stored_twice", lambda c: frozenset(t.alias for t in find_ties(c) if t.status == "stored twice"))


# A pair the rules tie that the file stores twice is tied by transformers 5.25 only where the two copies are equal
# (from_pretrained, modeling_utils.py: `_tied_params_are_equal`, torch.equal; "both are present in the checkpoints with
# different values, so we will NOT tie them"): its model's parameters() then holds both. The copies are compared whole
# up to COMPARE_WHOLE bytes a pair, else COMPARE_WINDOW elements at the start, middle and end of each (a head trained
# apart from its embedding differs everywhere): a few small reads, where the census otherwise reads headers only.
COMPARE_WHOLE = 64 << 20
COMPARE_WINDOW = 4096
COMPARE_CHUNK = 4 << 20   # bytes of each copy read at once (audit compares whole copies by it too)


def declined_ties(ckpt: Checkpoint) -> list[Tie]:
    """The pairs the rules tie that the file stores twice with different values, which transformers leaves untied
    (counted twice, as its parameters() counts them); `audit` calls such a tie broken."""
    return list(ckpt.derived("ties", lambda c: _found(c, False, 16 << 20))[1])


def find_ties(ckpt: Checkpoint, deep: bool = False, chunk_bytes: int = 16 << 20) -> list[Tie]:
    """Every tie the evidence supports; each alias appears once, with its strongest evidence. Rules
    come from the family and head the census resolved (census.resolve), never from other families:
    with no registered family only the file's own evidence (shared storage, safetensors metadata,
    contents with `deep`) is reported. Without `deep` (headers and config alone) found once a checkpoint."""
    if deep:
        return list(_found(ckpt, deep, chunk_bytes)[0])
    return list(ckpt.derived("ties", lambda c: _found(c, False, chunk_bytes))[0])


def _found(ckpt: Checkpoint, deep: bool, chunk_bytes: int) -> tuple[tuple[Tie, ...], tuple[Tie, ...]]:
    """(the ties, the declined ones: stored twice with copies that differ)."""
    ties = _find_ties(ckpt, deep, chunk_bytes)
    declined = tuple(filter(_declined(ckpt), ties))
    return tuple(t for t in ties if t not in declined), declined


def _declined(ckpt: Checkpoint) -> Callable[[Tie], bool]:
    """Whether a tie is one transformers declines: stored twice, its copies found different (a pair that cannot be
    compared here, a quantised weight's pieces or a damaged file, stands, as before)."""
    def declined(t: Tie) -> bool:
        if t.status != "stored twice" or t.evidence == "identical contents":
            return False
        try:
            return copies_differ(ckpt, t.alias, t.target) is True
        except CkptstatError:
            return False
    return declined


def copies_differ(ckpt: Checkpoint, a: str, b: str, whole: bool = False) -> bool | None:
    """Whether two stored tensors of one shape hold different values, as torch.equal says of them (NaN differs from
    itself), read COMPARE_CHUNK bytes at a time: whole copies with `whole`, else whole up to COMPARE_WHOLE a pair and
    three COMPARE_WINDOW windows beyond; None where either is not stored under that name or cannot be decoded here. A
    reader's error is raised."""
    import numpy as np  # (only for a tie stored twice: header-only commands import no numpy otherwise)

    ta, tb = ckpt.tensors.get(a), ckpt.tensors.get(b)
    if ta is None or tb is None or not dtypes.can_decode(ta.dtype) or not dtypes.can_decode(tb.dtype):
        return None   # (a quantised weight's logical name, its pieces stored under others)
    if ta.shape != tb.shape:
        return True
    n = ta.numel
    whole = whole or ta.byte_size + tb.byte_size <= COMPARE_WHOLE or n <= 3 * COMPARE_WINDOW
    spans = [(0, n)] if whole else [(0, COMPARE_WINDOW), ((n - COMPARE_WINDOW) // 2, COMPARE_WINDOW),
                                    (n - COMPARE_WINDOW, COMPARE_WINDOW)]
    step = max(1, COMPARE_CHUNK * 8 // max(ta.dt.bits, 1))
    for start, count in spans:
        for at in range(start, start + count, step):
            k = min(step, start + count - at)
            if not np.array_equal(ckpt.read_elements(a, at, k), ckpt.read_elements(b, at, k)):
                return True
    return False


def _find_ties(ckpt: Checkpoint, deep: bool, chunk_bytes: int) -> list[Tie]:
    ties: dict[str, Tie] = {}
    stored, ckpt = ckpt, logical(ckpt)   # quantised weights by their logical names and shapes (census/quant/)
    tensors = ckpt.tensors
    resolution = resolve(ckpt)

    def add(tie: Tie) -> None:
        ties.setdefault(tie.alias, tie)

    for alias, target in aliases(ckpt).items():
        add(Tie(alias, target, "shared storage", "aliased in file", tensors[alias].numel))
    for dropped, kept in ckpt.dropped.items():   # what the reader found recorded (core.Checkpoint.dropped)
        add(Tie(dropped, kept, "safetensors metadata", "absent from file", tensors[kept].numel))
    tied_cfg = tie_word_embeddings(ckpt)
    # No config: a head the names show but the file lacks is tied (the resolved spec says so); a head
    # stored twice is not claimed tied, since nothing says the model tied it.
    names_tied = tied_cfg is None and resolution.spec is not None and resolution.spec.tied_embeddings
    for rule in resolution.tie_rules:   # the resolved family's, for the resolved head
        for name in filter(methodcaller("endswith", rule.target), tensors):   # (in C: a 200k-tensor header's loop)
            if len(name) > len(rule.target) and name[-len(rule.target) - 1] != ".":
                continue
            outer = name[: len(name) - len(rule.target)]
            alias = outer + rule.alias
            if rule.when == "config" and not tied_cfg and not (names_tied and alias not in tensors):
                continue
            label = "config tie_word_embeddings" if rule.when == "config" else "architecture"
            if alias not in tensors:
                if _has_head(ckpt, outer, rule, resolution.head):
                    add(Tie(alias, name, label, "absent from file", tensors[name].numel, rule.module))
            elif alias not in ties and tensors[alias].shape == tensors[name].shape:
                add(Tie(alias, name, label, "stored twice", tensors[name].numel, rule.module))
    for absent, target, _ in _structural(ckpt):
        add(Tie(absent, target, "structural", "absent from file", tensors[target].numel))
    _tf_spelled_rules(ckpt, resolution, tied_cfg, names_tied, add, ties)
    own = class_ties(ckpt.config, tensors)
    for t in [t for t in ties.values() if _ruled_out(ckpt, own, t.alias, t.target, t.evidence, t.status)]:
        del ties[t.alias]
    if own is not None:
        _class_table_ties(ckpt, own, add, ties)
    if deep:
        for a, b in identical_tensors(stored, chunk_bytes):
            if a not in ties and b not in ties and a in tensors and b in tensors:
                add(Tie(b, a, "identical contents", "stored twice", tensors[b].numel))
    return list(ties.values())


def _ruled_out(ckpt: Checkpoint, own: ClassTies | None, alias: str, target: str, evidence: str, status: str) -> bool:
    """Is a tie the rules inferred from an absent name (a family's rule, a structural rule) contradicted?
    (1) config.json names a class whose own tie groups (families/tie_table.py) hold no such name, in a file
    spelled as that class spells its names: LXMERT's and ESM's `decoder.bias` (their decoder Linear has no bias;
    the head's `bias` is its own). (2) The file stores tied names over one storage: torch.save and
    save_pretrained's .bin keep every name of a tied group, so a name such a file lacks is not in the model
    (LXMERT's, ESM's heads in a bare state_dict read as BERT's). (3) Both names are stored in a file that records
    storages (a torch pickle), each over its own, and config.json does not set tie_word_embeddings: the model that
    wrote it did not tie them (transformers 5 unties LongT5's stacks from `shared` with the switch off). A file
    whose config asks for the tie keeps it (a state_dict rebuilt tensor by tensor, as consolidation tools write it,
    is still loaded tied). (4) Both names are stored and config.json names a class the tie table lists: they are
    tied only if one of the class's tie groups under this config holds both (transformers 5 ties BERT's decoder bias,
    and a T5's head, only with tie_word_embeddings on; T5's stacks always)."""
    if evidence in ("shared storage", "safetensors metadata", "identical contents"):
        return False
    if status == "stored twice" and own is not None:   # (4) the class says which names are one object
        return not any(alias in g and target in g for g in own.groups)
    if status == "stored twice":   # (3), unless config.json asks for the tie: a consolidated state_dict still ties
        a, b = ckpt.tensors[alias], ckpt.tensors[target]
        asked = (ckpt.config or {}).get("tie_word_embeddings") is True
        return not asked and a.storage is not None and b.storage is not None and a.alias_key != b.alias_key
    if status != "absent from file":
        return False
    if own is not None and alias not in own.names and (not own.groups or any(n in ckpt.tensors for n in own.names)):
        return True
    return bool(aliases(ckpt))


def _class_table_ties(ckpt: Checkpoint, own: ClassTies, add: Callable[[Tie], None], ties: dict[str, Tie]) -> None:
    """The ties of the class config.json names, as transformers ties them (families/tie_table.py): each name of a
    tie group the file lacks is the group's stored tensor (save_pretrained keeps one name of each group); with the
    config's switch on, each other name of it the file stores again, separately, in the same shape, a copy
    transformers ties on load (with it off the table's groups are not the model's: transformers 5.25 unties
    LongT5's stacks and T5's head although the table, built with the switch on, lists them as always tied). A file
    that stores tied names over one storage lacks none (`_ruled_out` (2)): a name of the group it lacks is one its
    writer spelled otherwise (transformers 5's in-memory `lm_head` for GPT-NeoX's saved `embed_out`)."""
    tensors = ckpt.tensors
    label = f"config.json architectures {own.cls}"
    for group in own.groups:
        present = [n for n in group if n in tensors]
        if not present:
            continue
        target = next((n for n in present if n not in ties), present[0])
        for name in group:
            if name not in tensors:
                if not _ruled_out(ckpt, own, name, target, label, "absent from file"):
                    add(Tie(name, target, label, "absent from file", tensors[target].numel))
            elif own.switch and name != target and name not in ties and tensors[name].shape == tensors[target].shape:
                add(Tie(name, target, label, "stored twice", tensors[name].numel))


def _tf_spelled_rules(ckpt: Checkpoint, resolution: Any, tied_cfg: bool | None, names_tied: bool,
                      add: Callable[[Tie], None], ties: dict[str, Tie]) -> None:
    """The family's tie rules (PyTorch names) on a TF file (google-research, HF TF .h5), whose names are
    matched as transformers' converters spell them (families.framework.infer.canonical_name: `mlm___cls/predictions/
    bias:0` is `cls.predictions.bias`). Only ties no other evidence found (a structural tie is one), each
    under the PyTorch name of the absent alias; a PyTorch file is skipped (families.framework.infer.tf_spelled)."""
    tensors = ckpt.tensors
    if not tf_spelled(tensors, name_forms(ckpt)):
        return
    spelled = {canonical_name(n): n for n in tensors}
    if len(spelled) != len(tensors):
        return
    found = {canonical_name(t.alias) for t in ties.values()}
    for rule in resolution.tie_rules:
        for canon, name in spelled.items():
            if not canon.endswith(rule.target) or (len(canon) > len(rule.target) and canon[-len(rule.target) - 1] != "."):
                continue
            outer = canon[: len(canon) - len(rule.target)]
            alias = outer + rule.alias
            if alias in found or alias in spelled or (rule.when == "config" and not tied_cfg and not names_tied):
                continue
            if _has_head(ckpt, outer, rule, resolution.head):
                label = "config tie_word_embeddings" if rule.when == "config" else "architecture"
                add(Tie(alias, name, label, "absent from file", tensors[name].numel, rule.module))
                found.add(alias)


def identical_tensors(ckpt: Checkpoint, chunk_bytes: int = 16 << 20) -> list[tuple[str, str]]:
    """Pairs (first, duplicate) of distinct stored tensors with equal dtype, shape and contents,
    found by streaming a hash of each candidate in chunks. Constant tensors (all zeros, all ones)
    are left out: equal by initialisation, they say nothing about tying."""
    first_of = aliases(ckpt)
    groups: dict[tuple, list[str]] = {}
    for t in ckpt:
        if t.name not in first_of and t.numel > 1 and t.dt.kind != "str":
            groups.setdefault((t.dtype, t.shape), []).append(t.name)
    out = []
    for names in groups.values():
        if len(names) < 2:
            continue
        seen: dict[bytes, str] = {}
        for name in names:
            h = hashlib.blake2b(digest_size=20)
            lo = hi = None
            for chunk in ckpt.iter_chunks(name, chunk_bytes):
                h.update(chunk.tobytes())
                cmin, cmax = chunk.min(), chunk.max()
                lo = cmin if lo is None else min(lo, cmin)
                hi = cmax if hi is None else max(hi, cmax)
            if lo == hi:
                continue
            digest = h.digest()
            if digest in seen:
                out.append((seen[digest], name))
            else:
                seen[digest] = name
    return out


def structural_tie_notes(ckpt: Checkpoint) -> list[str]:
    """Ties a checkpoint shows only by what it lacks (naming.structural_ties), as summary notes."""
    ckpt = logical(ckpt)
    own = class_ties(ckpt.config, ckpt.tensors)
    return [f"structural tie: {absent} is not stored; the model uses {tied_to} ({evidence})"
            for absent, tied_to, evidence in _structural(ckpt)
            if not _ruled_out(ckpt, own, absent, tied_to, "structural", "absent from file")]


def _structural(ckpt: Checkpoint) -> list[tuple[str, str, str]]:
    """naming.structural_ties of a (logical) checkpoint, once: the summary's notes and its tie verdict both ask."""
    return ckpt.derived("structural_ties", lambda c: structural_ties(c.tensors, name_forms(c)))
