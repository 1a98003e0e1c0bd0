"""GraniteMoE-SWA (transformers modeling_granitemoe_swa.py): GraniteMoE-Shared's layer with GraniteSWA's attention,
described in granitemoe.py (GRANITEMOE_SWA); a family of its own because llama.cpp has no architecture for it (no
GGUF names) and its files show it only by the sinks beside GraniteMoE's router."""
from __future__ import annotations

from . import granitemoe
from .framework import layout
from .framework.base import Family, Sample

_SIZES = dict(layout.TINY_MOE, num_local_experts=4, num_hidden_layers=5, sliding_window=4,
              layer_types=["full_attention"] + 4 * ["sliding_attention"])

FAMILY = Family(
    name="granitemoe_swa",
    # tried before them: GraniteSWA's sinks, and LLaMA's, gpt-oss's and Flint's signatures match its files too
    before=("granite_swa", "llama", "gpt_oss", "flint"),
    **{**layout.family_fields({"granitemoe_swa": granitemoe.GRANITEMOE_SWA}, "attn_sinks"),
       "signature": r"(?!)", "from_config": granitemoe.from_config, "from_tensors": granitemoe.from_tensors,
       "gguf_tensor_names": ()},   # llama.cpp has no granitemoe_swa architecture
    # GraniteMoE's router (as held: transformers saves it so) beside the sinks
    signature_together=(r"(^|[./])layers[./]\d+[./]block_sparse_moe[./]router[./]", r"(^|[./])self_attn[./]sinks$"),
    gguf_architectures=(),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("GraniteMoeSWAConfig", dict(_SIZES, shared_intermediate_size=16),
               ("GraniteMoeSWAModel", "GraniteMoeSWAForCausalLM"), device="cpu"),
        Sample("GraniteMoeSWAConfig", dict(_SIZES, layer_rope_theta=[10000.0, 0, 10000.0, 0, 0], tie_word_embeddings=True),
               ("GraniteMoeSWAForCausalLM",), device="cpu"),
    ),
)
