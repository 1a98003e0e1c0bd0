"""Folders that are not one whole model: a PEFT adapter and a diffusers pipeline (docs/adapters.md); and a file
beside a model's config.json that records its quantisation (modelopt's hf_quant_config.json, AutoGPTQ's
quantize_config.json: docs/quantized.md).

- A PEFT adapter folder (peft `PeftModel.save_pretrained`, peft/utils/constants.py): `adapter_config.json`
  beside `adapter_model.safetensors` (SAFETENSORS_WEIGHTS_NAME) or `adapter_model.bin` (WEIGHTS_NAME). The
  weights are read as any safetensors or torch file is; the config marks the Checkpoint as an adapter.
- NVIDIA modelopt's `export_hf_checkpoint` writes `hf_quant_config.json` (`{"producer": {"name": "modelopt"},
  "quantization": {"quant_algo": "FP8" | "NVFP4" | ..., "exclude_modules": [...]}}`) beside config.json; its older
  exports put no quantization_config into config.json, and vLLM reads the quantisation from this file. AutoGPTQ and
  GPTQModel write `quantize_config.json` (a quantization_config's fields: bits, group_size, desc_act, sym,
  checkpoint_format...), the only record in AutoGPTQ-era uploads, which its loaders read.
- A diffusers pipeline folder (diffusers `DiffusionPipeline.save_pretrained`, pipeline_utils.py):
  `model_index.json` maps each component name to `[library, class]` (`[null, null]` for an absent one),
  and each component is saved in the subfolder of its name: models as `diffusion_pytorch_model.*`
  (diffusers ModelMixin) or `model.safetensors` (transformers), schedulers and tokenizers without weights.

Names and paths only; the JSON is read by configs.load_config (bounded, regular files only)."""
from __future__ import annotations

import os
from collections.abc import Mapping

ADAPTER_CONFIG = "adapter_config.json"
# peft/utils/constants.py SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME (preferred in this order, as peft loads them)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
QUANT_SIDECARS = ("hf_quant_config.json", "quantize_config.json")
PIPELINE_INDEX = "model_index.json"
# diffusers/utils/constants.py: SAFE_WEIGHTS_INDEX_NAME, SAFETENSORS_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME
DIFFUSERS_WEIGHTS = ("diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model.safetensors",
                     "diffusion_pytorch_model.bin.index.json", "diffusion_pytorch_model.bin")


def adapter_config_beside(weights: str) -> str | None:
    """The adapter_config.json that makes `weights` (an `adapter_model.*` file) a PEFT adapter, else None."""
    if not os.path.basename(weights).startswith("adapter_model."):
        return None
    p = os.path.join(os.path.dirname(os.path.abspath(weights)), ADAPTER_CONFIG)
    return p if os.path.isfile(p) else None


def quant_sidecar_beside(config: str, cfg: Mapping[str, object]) -> str | None:
    """The quantisation record (QUANT_SIDECARS, the first there) beside a local config.json that names no
    quantization_config, else None."""
    if "quantization_config" in cfg:
        return None
    folder = os.path.dirname(os.path.abspath(config))
    return next((p for name in QUANT_SIDECARS if os.path.isfile(p := os.path.join(folder, name))), None)


def adapter_weights(path: str) -> str | None:
    """The adapter weights file of a PEFT adapter folder (even one that also holds a full model's weights),
    or `path` itself when it is an adapter_model.* file with its adapter_config.json beside it; else None."""
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, ADAPTER_CONFIG)):
            return None
        return next((os.path.join(path, w) for w in ADAPTER_WEIGHTS if os.path.isfile(os.path.join(path, w))), None)
    return path if adapter_config_beside(path) is not None else None


def is_adapter(path: str) -> bool:
    """A PEFT adapter folder, or an adapter_model.* file with its adapter_config.json beside it."""
    return adapter_weights(path) is not None


def is_pipeline(path: str) -> bool:
    """A diffusers pipeline folder: model_index.json at its top."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, PIPELINE_INDEX))


def component_name_ok(name: str) -> bool:
    """A model_index.json key that names a subfolder of the pipeline folder (never a path elsewhere)."""
    return bool(name) and os.path.basename(name) == name and name not in (".", "..") and "\\" not in name
