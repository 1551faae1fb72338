"""A Stable-Diffusion-style UNet, one denoising step: diffusers' UNet2DConditionModel built from a
config with random weights (nothing is downloaded). Its down and up blocks interleave ResNet blocks
with cross-attention to the text encoder's states, whose key and value projections depend on the
text alone and so run beside the image path: what torchsched measured 5-9% on end to end.

tiny   two levels of 32 and 64 channels on an 8x8 latent (0.8M parameters): the tests' and the CPU
       bench's
sd15   Stable Diffusion 1.5's UNet (320 to 1280 channels, 64x64 latents, 77 text tokens of 768;
       860M parameters): the GPU benchmark's
"""

import torch
from torch import nn

TINY = {"sample_size": 8, "in_channels": 4, "out_channels": 4, "layers_per_block": 1,
        "block_out_channels": (32, 64), "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"), "cross_attention_dim": 32, "attention_head_dim": 8,
        "norm_num_groups": 8}
TINY_TEXT = (7, 32)  # text tokens, their width
# runwayml/stable-diffusion-v1-5's unet/config.json, the keys that shape it.
SD15 = {"sample_size": 64, "in_channels": 4, "out_channels": 4, "layers_per_block": 2,
        "block_out_channels": (320, 640, 1280, 1280),
        "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        "cross_attention_dim": 768, "attention_head_dim": 8, "norm_num_groups": 32}
SD15_TEXT = (77, 768)
CONFIGS = {"tiny": (TINY, TINY_TEXT), "sd15": (SD15, SD15_TEXT)}


class UNetStep(nn.Module):
    """The UNet called as a denoising loop calls it: the noisy latent, the timestep (one per
    image), the text encoder's states; the predicted noise."""

    def __init__(self, config: dict):
        super().__init__()
        from diffusers import UNet2DConditionModel

        self.unet = UNet2DConditionModel(**config)

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor):
        return self.unet(sample, timestep, encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]


def input_specs(size: str, batch: int) -> list:
    """The step's inputs (export_models' spec form): a latent, timesteps in [0, 1000), text states."""
    config, (tokens, width) = CONFIGS[size]
    side = config["sample_size"]
    return [{"name": "sample", "shape": [batch, config["in_channels"], side, side], "dtype": "float32"},
            {"name": "timestep", "shape": [batch], "dtype": "int64", "range": [0, 1000]},
            {"name": "encoder_hidden_states", "shape": [batch, tokens, width], "dtype": "float32"}]
