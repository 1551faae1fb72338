"""A decoder that owns its KV caches, the way gpt-fast (and torchtune, and most hand-written decoders)
keep them: each layer's attention has a KVCache module with two buffers, written in place at the
positions the call gives (`k_cache[:, :, input_pos] = k`), and the position is an input tensor.
Llama's shape: RMSNorm, rotary embeddings on real numbers, grouped-query attention, SwiGLU.
Random weights (the caller seeds torch); nothing is downloaded.

    model = Decoder(DecoderConfig.tiny()).eval()
    logits = model(tokens, input_pos)      # tokens [batch, steps] int64, input_pos [steps] int64

greedy_decode() is the loop a user writes around it: the prompt fed one token at a time, then each
new token the argmax of the last logits. `step` may be the module or anything that runs it
(opara.compile's CompiledModel).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int = 256
    dim: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2  # grouped-query attention: heads / kv_heads query heads share one K and V
    intermediate: int = 128
    max_batch: int = 1
    max_seq: int = 32  # the caches' length: positions 0 .. max_seq - 1
    rope_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @classmethod
    def tiny(cls, **changes) -> "DecoderConfig":
        """Small enough for a committed fixture and a test: about 60 KB of weights."""
        return cls(vocab_size=32, dim=16, layers=2, heads=2, kv_heads=1, intermediate=32, max_seq=16, **changes)


class KVCache(torch.nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        shape = (config.max_batch, config.kv_heads, config.max_seq, config.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # k, v: [batch, kv_heads, steps, head_dim], written at positions input_pos [steps].
        self.k_cache[:, :, input_pos] = k
        self.v_cache[:, :, input_pos] = v
        return self.k_cache, self.v_cache


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x [batch, steps, heads, head_dim] turned by freqs [steps, head_dim / 2, 2] (cos, sin)."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    freqs = freqs.view(1, pairs.size(1), 1, pairs.size(3), 2)
    turned = torch.stack([pairs[..., 0] * freqs[..., 0] - pairs[..., 1] * freqs[..., 1],
                          pairs[..., 1] * freqs[..., 0] + pairs[..., 0] * freqs[..., 1]], -1)
    return turned.flatten(3)


class Attention(torch.nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        kv = config.kv_heads * config.head_dim
        self.wqkv = torch.nn.Linear(config.dim, config.dim + 2 * kv, bias=False)
        self.wo = torch.nn.Linear(config.dim, config.dim, bias=False)
        self.kv_cache = KVCache(config)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, mask: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        c = self.config
        batch, steps, _ = x.shape
        kv = c.kv_heads * c.head_dim
        q, k, v = self.wqkv(x).split([c.dim, kv, kv], dim=-1)
        q = rotary(q.view(batch, steps, c.heads, c.head_dim), freqs)
        k = rotary(k.view(batch, steps, c.kv_heads, c.head_dim), freqs)
        v = v.view(batch, steps, c.kv_heads, c.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = self.kv_cache.update(input_pos, k, v)
        k = k.repeat_interleave(c.heads // c.kv_heads, dim=1)
        v = v.repeat_interleave(c.heads // c.kv_heads, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).contiguous().view(batch, steps, c.dim))


class FeedForward(torch.nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.w1 = torch.nn.Linear(config.dim, config.intermediate, bias=False)
        self.w3 = torch.nn.Linear(config.dim, config.intermediate, bias=False)
        self.w2 = torch.nn.Linear(config.intermediate, config.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(torch.nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.attention_norm = RMSNorm(config.dim)
        self.ffn_norm = RMSNorm(config.dim)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, mask: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Decoder(torch.nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.tok_embeddings = torch.nn.Embedding(config.vocab_size, config.dim)
        self.layers = torch.nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.dim)
        self.output = torch.nn.Linear(config.dim, config.vocab_size, bias=False)
        # Read-only tables, as gpt-fast's setup_caches makes them: the rotary angles' cos and sin by
        # position, and the causal mask.
        half = config.head_dim // 2
        inverse = 1.0 / (config.rope_base ** (torch.arange(0, half).float() / half))
        angles = torch.outer(torch.arange(config.max_seq).float(), inverse)
        self.register_buffer("freqs", torch.stack([angles.cos(), angles.sin()], -1), persistent=False)
        self.register_buffer("causal_mask", torch.tril(torch.ones(config.max_seq, config.max_seq, dtype=torch.bool)),
                             persistent=False)
        # Wider than PyTorch's default initialisation, under which a random model's greedy tokens
        # soon repeat one token: a test of the decoding loop then checks little.
        for module in self.modules():
            if isinstance(module, torch.nn.Linear):
                torch.nn.init.normal_(module.weight, std=2 / config.dim**0.5)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        mask = self.causal_mask[None, None, input_pos]
        freqs = self.freqs[input_pos]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, freqs, mask, input_pos)
        return self.output(self.norm(x))

    def caches(self) -> dict[str, torch.Tensor]:
        """The KV caches by their buffers' names (what CompiledModel.state() names them)."""
        return {name: buffer for name, buffer in self.named_buffers() if "kv_cache" in name}


def greedy_decode(step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], prompt: torch.Tensor, new_tokens: int,
                  after_step: Callable[[int], None] | None = None) -> torch.Tensor:
    """The prompt [batch, n] fed one token at a time from position 0, then `new_tokens` tokens, each
    the argmax of the last step's logits. `after_step(position)` is called after each step (a test
    checks the state there). Returns the new tokens, [batch, new_tokens]."""
    device = prompt.device
    tokens = []
    logits = None
    for position in range(prompt.size(1) + new_tokens - 1):
        if position < prompt.size(1):
            token = prompt[:, position:position + 1]
        else:
            token = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(token)
        logits = step(token, torch.tensor([position], device=device))
        if after_step is not None:
            after_step(position)
    tokens.append(logits[:, -1].argmax(-1, keepdim=True))
    return torch.cat(tokens, 1)
