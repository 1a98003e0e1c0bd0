"""Name tables beside the bucket / role rules (naming/__init__.py): which 2-D weights are stored [in, out]
(kernel_layout) and which heads store no decoder weight because it is another tensor (structural_ties)."""
from __future__ import annotations

import re
from collections.abc import Iterable

from . import _rules, normalize

# ---------------------------------------------------------------- kernel layout and structural ties
# Which 2-D weights are stored [in, out] (TF/Keras Dense kernels: y = x @ kernel) and which [out, in]
# (torch nn.Linear; google-research's NSP output_weights, used with transpose_b=True).
LAYOUT_RULES = _rules([
    (r"(^|\.)_?kernel$", "in_out"),                                 # TF1 / TF2 / Keras Dense (Keras 3: _kernel)
    (r"(^|\.)cls\.seq_relationship\.output_weights$", "out_in"),    # google-research BERT NSP head
])


# A literal every LAYOUT_RULES match contains (tests/test_quick_path.py checks): most names have none
# and skip the rules (normalize creates neither).
_LAYOUT_LITERALS = ("kernel", "output_weights")


def kernel_layout(name: str, shape: tuple[int, ...]) -> str | None:
    """"in_out" or "out_in" for a 2-D weight whose layout its name tells, else None."""
    if len(shape) != 2 or not any(x in name for x in _LAYOUT_LITERALS):
        return None
    n = normalize(name)
    for pattern, layout in LAYOUT_RULES:
        if pattern.search(n):
            return layout
    return None


def out_in_shape(shape: tuple[int, ...], layout: str | None) -> tuple[int, ...]:
    """The [out, in] shape of a 2-D weight stored in `layout` (what FLOPs and cross-format comparisons use);
    a 4-D convolution kernel stored "hwio" (Flax: [h, w, in, out]) as torch's [out, in, h, w]."""
    if layout == "hwio" and len(shape) == 4:
        return (shape[3], shape[2], shape[0], shape[1])
    return (shape[1], shape[0]) if layout == "in_out" and len(shape) == 2 else tuple(shape)


# Heads whose decoder weight is not stored because it is the word-embedding table. Each rule: the
# name that is present (normalised), how to spell the absent name from it, the embedding it reuses.
STRUCTURAL_TIE_RULES = [
    # google-research BERT (run_pretraining.py get_masked_lm_output): only output_bias is a variable;
    # logits = matmul(x, embedding_table, transpose_b=True)
    (re.compile(r"(^|\.)cls\.predictions\.output_bias$"), ("output_bias", "output_weights"),
     re.compile(r"(^|\.)bert\.embeddings\.word_embeddings$"),
     "google-research BERT MLM head stores only output_bias; its logits multiply by the word-embedding table"),
    # Hugging Face TF BERT (TFBertLMPredictionHead): bias:0 with no decoder kernel; input_embeddings reused
    (re.compile(r"(^|\.)mlm___cls\.predictions\.bias$"), ("bias", "decoder/weight"),
     re.compile(r"(^|\.)bert\.embeddings\.word_embeddings\.weight$"),
     "Hugging Face TF BERT MLM head stores only its bias; the decoder is the input embedding"),
    # GGUF decoders (llama.cpp llama-model.cpp: output = token_embd, TENSOR_DUPLICATED, when the file has
    # no output.weight): the final norm is stored, the output projection is not
    (re.compile(r"^output_norm\.weight$"), ("output_norm", "output"), re.compile(r"^token_embd\.weight$"),
     "GGUF decoder without output.weight: llama.cpp uses token_embd.weight as the output projection"),
    # ...and GGUF T5, whose decoder's final norm is dec.output_norm (llama-model.cpp LLM_ARCH_T5, the same fallback)
    (re.compile(r"^dec\.output_norm\.weight$"), ("dec.output_norm", "output"), re.compile(r"^token_embd\.weight$"),
     "GGUF T5 without output.weight: llama.cpp uses token_embd.weight as the output projection"),
    # transformers' PyTorch MLM heads always hold a decoder Linear (BertLMPredictionHead: cls.predictions.decoder,
    # RobertaLMHead and its copies: lm_head.decoder) whose bias is the head's `bias`; save_pretrained drops the
    # decoder's weight only as the tied copy of the word embeddings, and its bias as the head's. So a head
    # stored without them ties them, whichever model copied the head (RoFormer, MegatronBERT, MPNet, ...).
    (re.compile(r"(^|\.)cls\.predictions\.bias$"), ("bias", "decoder.weight"),
     re.compile(r"(^|\.)embeddings\.word_embeddings\.weight$"),
     "BERT-style MLM head saved without its decoder weight: the word-embedding table (save_pretrained drops tied copies)"),
    (re.compile(r"(^|\.)cls\.predictions\.bias$"), ("bias", "decoder.bias"), re.compile(r"(^|\.)cls\.predictions\.bias$"),
     "BERT-style MLM head saved without its decoder bias: the head's bias"),
    (re.compile(r"(^|\.)lm_head\.dense\.weight$"), ("dense.weight", "decoder.weight"),
     re.compile(r"(^|\.)embeddings\.word_embeddings\.weight$"),
     "RoBERTa-style MLM head saved without its decoder weight: the word-embedding table (save_pretrained drops tied copies)"),
    (re.compile(r"(^|\.)lm_head\.dense\.weight$"), ("dense.weight", "decoder.bias"), re.compile(r"(^|\.)lm_head\.bias$"),
     "RoBERTa-style MLM head saved without its decoder bias: the head's bias"),
    # BART-style LM heads (BART, Pegasus, Marian, BlenderBot, PLBart, MVP, LED, BigBirdPegasus): the buffer
    # final_logits_bias beside an lm_head that save_pretrained dropped as the tied copy of `shared`
    (re.compile(r"(^|\.)final_logits_bias$"), ("final_logits_bias", "lm_head.weight"), re.compile(r"(^|\.)shared\.weight$"),
     "BART-style LM head saved without its weight: the shared embedding (save_pretrained drops tied copies)"),
]
# transformers' encoder-decoders with a `shared` embedding (BART, T5 and their copies: Pegasus, Marian, M2M-100,
# NLLB-MoE, LED, LongT5, UMT5, SwitchTransformers, ...) build each stack's embed_tokens as that module;
# save_pretrained stores `shared` alone. As STRUCTURAL_TIE_RULES, plus the module the model must hold beside
# the present name for the absent one to exist (T5EncoderModel has no decoder, so no decoder.embed_tokens).
STACK_TIE_RULES = [
    (re.compile(r"(^|\.)shared\.weight$"), ("shared.weight", f"{stack}.embed_tokens.weight"), f"{stack}.",
     f"encoder-decoder saved without its {stack}'s embed_tokens: the shared embedding (save_pretrained drops tied copies)")
    for stack in ("encoder", "decoder")
]


# A literal every STRUCTURAL_TIE_RULES `present` match contains in the raw name too (normalize creates
# none; tests/test_quick_path.py checks): a checkpoint whose names hold none skips the rules.
_STRUCTURAL_LITERALS = ("output_bias", "mlm___cls", "output_norm", "cls.predictions.bias", "lm_head.dense.weight",
                        "final_logits_bias", "shared.weight")


def structural_ties(names: Iterable[str], forms: str | None = None) -> list[tuple[str, str, str]]:
    """(absent name, tied to, evidence) for each head whose decoder weight the checkpoint lacks
    because the model reuses the word embeddings (docs/formats.md section 7: TF ties are structural).
    forms: the names' digit_forms, if known."""
    names = list(names)
    raw = "\n".join(names) if forms is None else forms
    if not any(lit in raw for lit in _STRUCTURAL_LITERALS):   # most checkpoints: no rule can match
        return []
    norm = {normalize(n): n for n in names}
    joined = "\n".join(norm)   # a rule no name matches is ruled out by one search over all names
    out = []
    rules: list[tuple[re.Pattern[str], tuple[str, str], str | None, re.Pattern[str], str]]
    rules = [(p, sub, None, tied, e) for p, sub, tied, e in STRUCTURAL_TIE_RULES]
    rules += [(p, sub, module, p, e) for p, sub, module, e in STACK_TIE_RULES]
    for present, (old, new), module, tied, evidence in rules:
        # re.M: ^ and $ at each name's ends; the rules hold no lookaround, so no name's match is missed
        if not re.search(present.pattern, joined, re.M):
            continue
        for n_norm, n in norm.items():
            if not present.search(n_norm):
                continue
            cut = n.rfind(old)
            absent = n[:cut] + new + n[cut + len(old):] if cut >= 0 else n + "/" + new
            if normalize(absent) in norm or (module is not None and not any(o.startswith(n[:cut] + module) for o in names)):
                continue
            target = next((orig for nn, orig in norm.items() if tied.search(nn)), None)
            if target is not None:
                out.append((absent, target, evidence))
    return out
