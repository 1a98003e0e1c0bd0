"""The useful part of a GGUF file's metadata, in a few labelled lines (what `gguf-dump --markdown` shows
in full): how it was quantised, which model it is, its context, rope, experts and tokenizer. Keys are
llama.cpp's (gguf-py `Keys`; `{arch}` is `general.architecture`); values are the reader's metadata text
(formats/gguf.py), so nothing here reads the file. A key the file lacks leaves its part out."""
from __future__ import annotations

from .gguf import array_length, string_bytes

# llama.cpp's `llama_ftype` (gguf-py constants.py LlamaFileType): general.file_type -> the name llama.cpp
# prints. "Mostly": the type of the large matrices; norms stay F32 (tests check it against gguf-py).
FILE_TYPES = {
    0: "ALL_F32", 1: "MOSTLY_F16", 2: "MOSTLY_Q4_0", 3: "MOSTLY_Q4_1", 7: "MOSTLY_Q8_0", 8: "MOSTLY_Q5_0",
    9: "MOSTLY_Q5_1", 10: "MOSTLY_Q2_K", 11: "MOSTLY_Q3_K_S", 12: "MOSTLY_Q3_K_M", 13: "MOSTLY_Q3_K_L",
    14: "MOSTLY_Q4_K_S", 15: "MOSTLY_Q4_K_M", 16: "MOSTLY_Q5_K_S", 17: "MOSTLY_Q5_K_M", 18: "MOSTLY_Q6_K",
    19: "MOSTLY_IQ2_XXS", 20: "MOSTLY_IQ2_XS", 21: "MOSTLY_Q2_K_S", 22: "MOSTLY_IQ3_XS", 23: "MOSTLY_IQ3_XXS",
    24: "MOSTLY_IQ1_S", 25: "MOSTLY_IQ4_NL", 26: "MOSTLY_IQ3_S", 27: "MOSTLY_IQ3_M", 28: "MOSTLY_IQ2_S",
    29: "MOSTLY_IQ2_M", 30: "MOSTLY_IQ4_XS", 31: "MOSTLY_IQ1_M", 32: "MOSTLY_BF16", 36: "MOSTLY_TQ1_0",
    37: "MOSTLY_TQ2_0", 38: "MOSTLY_MXFP4_MOE", 39: "MOSTLY_NVFP4", 40: "MOSTLY_Q1_0", 1024: "GUESSED",
}

def _join(parts: list[str | None]) -> str:
    return ", ".join(p for p in parts if p)


def facts(meta: dict[str, str]) -> dict[str, str]:
    """label -> one line; only the parts the file states."""
    arch = meta.get("general.architecture", "")

    def get(key: str) -> str | None:
        return meta.get(key.replace("{arch}", arch))

    def kv(key: str, label: str, unit: str = "") -> str | None:
        v = get(key)
        return None if v is None else f"{label} {v}{unit}"

    out: dict[str, str] = {}
    ft = get("general.file_type")
    out["gguf"] = _join([
        f"file type {FILE_TYPES.get(int(ft), 'unknown')} (general.file_type {ft})" if ft and ft.isdigit() else None,
        kv("general.quantization_version", "quantization version"), kv("general.alignment", "alignment"),
        kv("general.quantized_by", "quantized by")])
    out["model"] = _join([kv("general.name", "name"), kv("general.basename", "basename"),
                          kv("general.size_label", "size"), kv("general.finetune", "finetune"),
                          kv("general.version", "version"), kv("general.organization", "organization"),
                          kv("general.license", "license")])
    out["context"] = _join([kv("{arch}.context_length", "trained on", " tokens"),
                            kv("{arch}.attention.sliding_window", "sliding window")])
    out["rope"] = _join([kv("{arch}.rope.freq_base", "freq_base"), kv("{arch}.rope.dimension_count", "dims"),
                         kv("{arch}.rope.scaling.type", "scaling"), kv("{arch}.rope.scaling.factor", "factor"),
                         kv("{arch}.rope.scaling.original_context_length", "original context")])
    out["experts"] = _join([f"{v} routed" if (v := get("{arch}.expert_count")) else None,
                            f"{v} used per token" if (v := get("{arch}.expert_used_count")) else None,
                            f"{v} shared" if (v := get("{arch}.expert_shared_count")) else None])
    tokens = array_length(get("tokenizer.ggml.tokens") or "")
    merges = array_length(get("tokenizer.ggml.merges") or "")
    ids = [kv(f"tokenizer.ggml.{k}_token_id", k) for k in ("bos", "eos", "padding", "unknown")]
    template = get("tokenizer.chat_template")
    out["tokenizer"] = _join([get("tokenizer.ggml.model"), kv("tokenizer.ggml.pre", "pre"),
                              f"{tokens:,} tokens" if tokens is not None else None,
                              f"{merges:,} merges" if merges else None, *ids,
                              f"chat template {string_bytes(template):,} bytes" if template is not None else None])
    return {k: v for k, v in out.items() if v}
