#!/usr/bin/env python3
"""Exports opara's test models with random weights (fixed seed), on the CPU, in both formats.

For each model and batch size it writes into the output folder:
  <name>_b<batch>.pt      TorchScript (traced, eval mode)
  <name>_b<batch>.pt2     torch.export.save of the exported program
  <name>_b<batch>.json    the inputs (name, shape, dtype, value range) and where the model came from
  <name>_b<batch>.ref.pt  reference inputs and the outputs of both formats' own forward on them

With --dtype float16 or bfloat16 the model's weights and floating-point inputs are in that dtype
and <name> becomes <name>_<dtype> (branchy_bfloat16_b1.pt): the model is traced in that dtype, so
what it computes from its own dtype (an attention mask's fill value, say) is right for it.

Nothing is downloaded: every model is built from code and a config written here.
"""

import argparse
import copy
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opara_models import decoder, overflow, synthetic, unet  # noqa: E402

SEED = 0
SEQUENCE_LENGTH = 32


def image_input(batch, size):
    return [{"name": "x", "shape": [batch, 3, size, size], "dtype": "float32"}]


def token_inputs(batch, vocab, names):
    specs = [{"name": "input_ids", "shape": [batch, SEQUENCE_LENGTH], "dtype": "int64", "range": [0, vocab]}]
    for name in names:
        if name == "attention_mask":
            specs.append({"name": name, "shape": [batch, SEQUENCE_LENGTH], "dtype": "int64", "range": [1, 2]})
        else:  # decoder token ids
            specs.append({"name": name, "shape": [batch, SEQUENCE_LENGTH], "dtype": "int64", "range": [0, vocab]})
    return specs


def build_googlenet(batch):
    import torchvision

    model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True)
    return model, image_input(batch, 224), "torchvision.models.googlenet(weights=None, aux_logits=False)"


def build_inception_v3(batch):
    import torchvision

    model = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True)
    return model, image_input(batch, 299), "torchvision.models.inception_v3(weights=None, aux_logits=False)"


def build_resnet50(batch):
    import torchvision

    return torchvision.models.resnet50(weights=None), image_input(batch, 224), "torchvision.models.resnet50(weights=None)"


class BertOutputs(torch.nn.Module):
    """BertModel with named tensor inputs and a plain tuple of output tensors."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        result = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return result["last_hidden_state"], result["pooler_output"]


class T5Outputs(torch.nn.Module):
    """T5Model (encoder and decoder) with named tensor inputs and a plain tuple of outputs."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, decoder_input_ids):
        result = self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, return_dict=True)
        return result["last_hidden_state"], result["encoder_last_hidden_state"]


def build_bert_base(batch):
    import transformers

    config = transformers.BertConfig()  # bert-base defaults: 12 layers, hidden 768, 12 heads
    model = transformers.BertModel(config, add_pooling_layer=True)
    source = f"transformers {transformers.__version__} BertModel(BertConfig()), sequence length {SEQUENCE_LENGTH}"
    return BertOutputs(model), token_inputs(batch, config.vocab_size, ["attention_mask"]), source


def t5_small_config():
    import transformers

    # The published t5-small configuration, written out so that nothing is fetched.
    return transformers.T5Config(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6,
        num_heads=8, relative_attention_num_buckets=32, relative_attention_max_distance=128,
        dropout_rate=0.1, layer_norm_epsilon=1e-6, feed_forward_proj="relu", is_encoder_decoder=True,
        use_cache=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
    )


def build_t5_small(batch):
    import transformers

    config = t5_small_config()
    model = transformers.T5Model(config)
    source = f"transformers {transformers.__version__} T5Model(t5-small config), sequence length {SEQUENCE_LENGTH}"
    return T5Outputs(model), token_inputs(batch, config.vocab_size, ["decoder_input_ids"]), source


def build_vit(batch):
    import torchvision

    # ViT-B/16's construct at a tenth of its size: traced without gradients, each encoder block's
    # attention is aten::_native_multi_head_attention, whose unused attention weights are an
    # undefined tensor.
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                                                 hidden_dim=64, mlp_dim=128, num_classes=10)
    source = ("torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, "
              "hidden_dim=64, mlp_dim=128, num_classes=10)")
    return model, image_input(batch, 32), source


def build_branchy(batch):
    return synthetic.Branchy(), image_input(batch, 32), "scripts/opara_models/synthetic.py Branchy"


def build_chain(batch):
    return synthetic.Chain(), image_input(batch, 32), "scripts/opara_models/synthetic.py Chain"


def build_inplace(batch):
    return synthetic.Inplace(), image_input(batch, 16), "scripts/opara_models/synthetic.py Inplace"


def build_recurrent(batch):
    specs = [{"name": "x", "shape": [batch, 16, 32], "dtype": "float32"}]
    return synthetic.Recurrent(), specs, "scripts/opara_models/synthetic.py Recurrent"


def build_detect(batch):
    if batch != 1:
        raise ValueError("detect is a one-image model (its NMS runs on the first image): export it at --batch 1")
    return overflow.Detect(), image_input(batch, 32), "scripts/opara_models/overflow.py Detect"


def build_multihead_rnn(batch):
    specs = [{"name": "x", "shape": [batch, 8, 32], "dtype": "float32"}]
    return overflow.MultiheadRnn(), specs, "scripts/opara_models/overflow.py MultiheadRnn"


def build_decoder(batch):
    config = decoder.DecoderConfig.tiny(max_batch=batch)
    specs = [{"name": "tokens", "shape": [batch, 1], "dtype": "int64", "range": [0, config.vocab_size]},
             {"name": "input_pos", "shape": [1], "dtype": "int64", "range": [0, config.max_seq]}]
    return decoder.Decoder(config), specs, "scripts/opara_models/decoder.py Decoder(DecoderConfig.tiny()), one step"


def build_unet(batch):
    return (unet.UNetStep(unet.TINY), unet.input_specs("tiny", batch),
            "scripts/opara_models/unet.py UNetStep(TINY): diffusers' UNet2DConditionModel, one denoising step")


def build_unet_sd15(batch):
    return (unet.UNetStep(unet.SD15), unet.input_specs("sd15", batch),
            "scripts/opara_models/unet.py UNetStep(SD15): Stable Diffusion 1.5's UNet, one denoising step")


# Greedy decoding by the eager module, for the decoder's reference file: a prompt of this many
# tokens, fed one a step, then this many new tokens.
DECODE_PROMPT = 4
DECODE_NEW_TOKENS = 6


def decode_reference(model, batch):
    """What a C++ test decodes against: the prompt, eager's greedy tokens and every KV cache after
    each step, from the caches' first values (a copy of the model decodes: the export starts from
    the same first values)."""
    model = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(SEED)
    prompt = torch.randint(0, model.config.vocab_size, (batch, DECODE_PROMPT), generator=generator)
    caches = []
    tokens = decoder.greedy_decode(model, prompt, DECODE_NEW_TOKENS, after_step=lambda position: caches.append(
        {name: value.clone() for name, value in model.caches().items()}))
    return {"prompt": prompt, "tokens": tokens, "caches": caches}


# Models whose reference holds more than one call's outputs: what else the model is run for.
EXTRA_REFERENCES = {"decoder": decode_reference}

BUILDERS = {
    "googlenet": build_googlenet,
    "inception_v3": build_inception_v3,
    "resnet50": build_resnet50,
    "bert_base": build_bert_base,
    "t5_small": build_t5_small,
    "vit": build_vit,
    "branchy": build_branchy,
    "chain": build_chain,
    "inplace": build_inplace,
    "recurrent": build_recurrent,
    "detect": build_detect,
    "multihead_rnn": build_multihead_rnn,
    "decoder": build_decoder,
    "unet": build_unet,
    "unet_sd15": build_unet_sd15,
}
# Exported only when named: 860M parameters, the GPU benchmark's.
NAMED_ONLY = ("unet_sd15",)

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
}
# The dtypes a model can be exported in, and how far its two exports may stray from its eager
# forward before the export counts as broken: relative and absolute tolerance alike (about ten
# units in the last place of float16, six of bfloat16).
EXPORT_DTYPES = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}


def make_inputs(specs, seed):
    """The same recipe as opara's C++ make_inputs: one generator seeded once, inputs in order."""
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in specs:
        dtype = DTYPES[spec["dtype"]]
        if dtype.is_floating_point:
            tensors.append(torch.randn(spec["shape"], generator=generator, dtype=dtype))
        else:
            low, high = spec["range"]
            tensors.append(torch.randint(low, high, spec["shape"], generator=generator, dtype=dtype))
    return tensors


def flatten(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in flatten(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in flatten(item)]
    raise TypeError(f"model output of type {type(value).__name__} is not a tensor or a container of tensors")


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def exported_name(name, dtype):
    return name if dtype == "float32" else f"{name}_{dtype}"


def export_one(name, batch, out_dir, dtype="float32"):
    torch.manual_seed(SEED)
    model, specs, source = BUILDERS[name](batch)
    model.eval()
    if dtype != "float32":
        model.to(DTYPES[dtype])
        for spec in specs:
            if DTYPES[spec["dtype"]].is_floating_point:
                spec["dtype"] = dtype
    inputs = make_inputs(specs, SEED)
    stem = out_dir / f"{exported_name(name, dtype)}_b{batch}"
    started = time.perf_counter()
    with torch.no_grad():
        extra = EXTRA_REFERENCES[name](model, batch) if name in EXTRA_REFERENCES else {}
        # A model that writes its buffers (a decoder's KV caches) is saved with their first values:
        # each format is made from a copy no call has written.
        first_values = copy.deepcopy(model)
        eager = flatten(model(*inputs))
        traced = torch.jit.trace(copy.deepcopy(first_values), tuple(inputs), check_trace=False, strict=False)
        traced.save(str(stem) + ".pt")
        exported = torch.export.export(first_values, tuple(inputs), strict=False)
        torch.export.save(exported, str(stem) + ".pt2")
        from_script = flatten(torch.jit.load(str(stem) + ".pt")(*inputs))
        from_export = flatten(torch.export.load(str(stem) + ".pt2").module()(*inputs))
    torch.save({"inputs": inputs, "outputs_pt": from_script, "outputs_pt2": from_export, **extra}, str(stem) + ".ref.pt")
    for label, outputs in (("TorchScript", from_script), ("torch.export", from_export)):
        tolerance = EXPORT_DTYPES[dtype]
        pairs = [(a.float(), b.float()) for a, b in zip(eager, outputs)]
        if not all(torch.allclose(a, b, rtol=tolerance, atol=tolerance) for a, b in pairs):
            worst = max((a - b).abs().max().item() for a, b in pairs)
            raise RuntimeError(f"{name} ({dtype}): the {label} export differs from the eager model by {worst}")
    sidecar = {
        "model": name,
        "batch": batch,
        "dtype": dtype,
        "source": source,
        "seed": SEED,
        "torch": torch.__version__,
        # Reductions split their work by the intra-op thread count: the reference is bitwise only
        # at this count.
        "intra_op_threads": torch.get_num_threads(),
        "inputs": specs,
        "outputs": [{"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for t in eager],
        "reference": f"{stem.name}.ref.pt",
        "sha256": {"pt": sha256(str(stem) + ".pt"), "pt2": sha256(str(stem) + ".pt2")},
    }
    (out_dir / f"{stem.name}.json").write_text(json.dumps(sidecar, indent=2) + "\n")
    print(f"{stem.name}: .pt, .pt2, .json, .ref.pt in {time.perf_counter() - started:.1f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    every = [name for name in BUILDERS if name not in NAMED_ONLY]
    parser.add_argument("--models", nargs="+", default=every, choices=list(BUILDERS), metavar="NAME",
                        help=f"models to export (default: all of {', '.join(every)})")
    parser.add_argument("--batch", nargs="+", type=int, default=[1], help="batch sizes (default 1)")
    parser.add_argument("--dtype", default="float32", choices=list(EXPORT_DTYPES),
                        help="weights and floating-point inputs in this dtype; other than float32, the files are "
                        "named <name>_<dtype>_b<batch> (default float32)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "torchscript_models")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    for name in args.models:
        for batch in args.batch:
            if batch < 1:
                parser.error(f"--batch must be positive, got {batch}")
            export_one(name, batch, args.out, args.dtype)


if __name__ == "__main__":
    main()
