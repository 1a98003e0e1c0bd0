"""`--autocast bf16|fp16`: torch.autocast's mixed precision (what transformers' Trainer runs with bf16=True on a model
loaded in float32): the weights, their gradients and the optimizer state stay in float32, and each matmul (linear,
conv, SDPA) runs in the 16-bit dtype on a cast of its inputs.

What that holds, measured with saved_tensors_hooks and torch's own casts on CPU forwards under
torch.autocast("cpu", dtype=torch.bfloat16) (tests/test_memory_autocast.py):
 - a 16-bit copy of every weight and bias a matmul reads, its lm_head's (a tied word embedding's too), but not an
   embedding table's (embedding runs in float32): autocast caches the cast of a leaf parameter that requires grad for
   the whole autocast region, so all of them are held at the end of the forward (in training autograd keeps the
   weights' for the backward of their matmuls after the region too); in inference under no_grad the cache still
   holds them until the region ends (none where the parameters require no grad);
 - activations (saved.py, `rb`): each linear keeps its own 16-bit cast of a float32 input (q, k and v each of the
   norm's output, where a 16-bit model keeps one), the norms and the residual stream stay in float32 (the norms
   keep what a float32 model's keep), linear outputs and what the attention and the MLP keep are 16-bit; softmax runs
   in float32 on autocast's float32 list (GPT-2's too), and a 16-bit cast of it feeds the PV matmul;
 - routed experts run as transformers 5 runs them, torch's grouped_mm, which autocast does not cast: transformers casts
   their input to the weights' dtype, so they run in float32, with no cast of their weights and float32 activations
   (integrations/moe.py). Experts a modeling file runs otherwise (Llama 4's bmm over every expert, DBRX's and
   JetMoE's loops) are not measured: refused.
Training only. In inference under no_grad the cache holds the same casts until the region ends (none where the
parameters require no grad), but the rest depends on the model and is not modelled: Llama's cached keys are float32
(the rotary multiplies the 16-bit k by float32 cos and sin), its values 16-bit, GPT-2's both 16-bit; eager scores
plus a float32 mask are float32 (8 B a score, not 10). --mode inference with --autocast is refused."""
from __future__ import annotations

from ...errors import UsageError
from ...families import decoder_layout
from ...families.framework.base import ArchSpec
from ...families.framework.ops import Op

AUTOCAST = ("bf16", "fp16")   # their widths: planner.FLOAT_BYTES


def grouped_experts(s: ArchSpec) -> bool:
    """The model's routed experts run through transformers 5's grouped_mm experts (not Llama 4's every-expert bmm,
    DBRX's flat experts, JetMoE's mixture of attention)."""
    lay = decoder_layout(s)
    return bool(s.experts) and not (lay is not None and (lay.every_expert or lay.flat_experts or lay.moa))


def expert_op(op: Op) -> bool:
    """A routed expert's linear, its activation or its combine: under autocast in the float32 weights' dtype where
    grouped_experts(s)."""
    return ".experts" in op.module or "combine (x routing weight)" in op.module


def check(autocast: str | None, mode: str, weights_dtype: str | None, zero: int, s: ArchSpec | None = None) -> None:
    """UsageError for --autocast settings the planner does not model."""
    if autocast is None:
        return
    if autocast not in AUTOCAST:
        raise UsageError(f"--autocast must be bf16 or fp16, got {autocast!r}")
    if mode != "training":
        raise UsageError("--autocast plans training; inference under autocast is not modelled (what it holds depends on "
                         "the model: Llama's cached keys are float32 after the rotary, its values 16-bit): plan it with "
                         "--weights-dtype fp32")
    if s is not None and s.experts and not grouped_experts(s):
        raise UsageError(f"--autocast with {s.model_type}'s routed experts (run by its modeling file, not transformers' "
                         "grouped_mm) is not measured: plan --weights-dtype bf16 without --autocast")
    if weights_dtype != "fp32":
        raise UsageError(f"--autocast casts float32 weights per op; --weights-dtype {weights_dtype} is not: plan "
                         f"16-bit weights as --weights-dtype {autocast} without --autocast")
    if zero == 3:
        raise UsageError("--autocast with --zero 3: ZeRO-3 and FSDP train with their own mixed precision (16-bit "
                         "parameters gathered per layer, float32 master copies): plan it as --weights-dtype bf16 "
                         "--master-weights without --autocast")


def copies_rule(autocast: str, width: float) -> str:
    return (f"torch.autocast's {autocast} cast of every weight and bias a matmul reads (linears, the LM head; "
            f"not the embedding tables), {width:g} B/param, cached for the region, all held at the forward's end; "
            "autograd keeps the weights' for their matmuls' backward")
