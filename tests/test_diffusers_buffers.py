"""Buffers of diffusers models as each class registers them (families/diffusers_buffer_table.json, written by
fixtures/make_diffusers_buffer_table.py from diffusers itself): a diffusers `save_pretrained` folder's persistent
buffers (SD 3's `pos_embed.pos_embed`, LTX-Video's VAE `latents_mean` / `latents_std`, AnimateDiff's motion modules'
`pos_embed.pe`, UNet1D's resampling kernels) are counted apart, and the unique parameter count is the model's
`parameters()` total. The oracle is the model object diffusers builds, saved with its own save_pretrained."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
D = pytest.importorskip("diffusers")

from ckptstat import summarize  # noqa: E402
from ckptstat.families import buffer_table  # noqa: E402

SD3 = dict(sample_size=16, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=16, num_attention_heads=2,
           joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=32, out_channels=4,
           pos_embed_max_size=32)
MODELS = {
    "SD3Transformer2DModel": lambda: D.SD3Transformer2DModel(**SD3),
    "SD3ControlNetModel": lambda: D.SD3ControlNetModel(**SD3),
    "AutoencoderKLLTXVideo": lambda: D.AutoencoderKLLTXVideo(
        block_out_channels=(8, 8, 8, 8), decoder_block_out_channels=(8, 8, 8, 8), latent_channels=4,
        layers_per_block=(1, 1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 1, 1)),
    "MotionAdapter": lambda: D.MotionAdapter(block_out_channels=(8, 16), motion_layers_per_block=1,
                                             motion_mid_block_layers_per_block=1, motion_num_attention_heads=2,
                                             motion_norm_num_groups=4),
    "UNet1DModel": lambda: D.UNet1DModel(),
    "UNet2DConditionModel": lambda: D.UNet2DConditionModel(   # no buffer: the name rules are right for it
        block_out_channels=(8, 16), layers_per_block=1, cross_attention_dim=8, attention_head_dim=2, norm_num_groups=4,
        sample_size=8, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")),
}


@pytest.mark.parametrize("cls", sorted(MODELS))
def test_a_diffusers_folder_counts_its_buffers_apart(tmp_path, cls):
    torch.manual_seed(0)
    model = MODELS[cls]()
    model.save_pretrained(tmp_path)
    params = dict(model.named_parameters())
    buffers = sorted(n for n in model.state_dict() if n not in params)
    s = summarize(str(tmp_path))
    assert s["parameters"]["unique"] == sum(p.numel() for p in model.parameters()), cls
    assert sorted(n for r in s["non_parameters"] for n in r["names"]) == buffers, cls
    assert bool(buffers) == (cls in buffer_table._table(buffer_table._DIFFUSERS)), cls


def test_the_table_is_the_classes_own():
    """Each class the table lists, rebuilt on the meta device as the generator builds it: the same differences."""
    from conftest import fixture_script
    differences = fixture_script("make_buffer_table").differences
    with open(buffer_table._DIFFUSERS, encoding="utf-8") as f:
        table = json.load(f)
    assert table["diffusers"] == D.__version__
    for cls in ("SD3Transformer2DModel", "AutoencoderKLLTXVideo", "UNetMotionModel", "UNet1DModel"):
        with torch.device("meta"):
            model = getattr(D, cls)()
        assert differences(model) == table["classes"][cls], cls
