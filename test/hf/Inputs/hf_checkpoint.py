"""A checkpoint folder written by Hugging Face transformers itself, and its
own forward on it:

  hf_checkpoint.py CONFIG.json LAYERS DIR SHARD_SIZE PROMPTS.txt REF.safetensors
                   [float32|bfloat16|float16]

builds the config's architecture (its model_type: MixtralForCausalLM,
Qwen3MoeForCausalLM, ...) with LAYERS layers (seeded random weights, the
RMSNorm weights drawn in [1, 1.1) rather than left at 1, biases drawn
rather than zero), saves it to DIR in the given dtype (default float32) with
save_pretrained(max_shard_size=SHARD_SIZE) (shards and
model.safetensors.index.json, as users download them), then runs its
forward in f32 on the saved values on each prompt line and writes what the
emitted program writes: req{r}.logits [V] (last position) and
req{r}.layers.{i}.k / .v [T, n_kv, d_h] (K after RoPE, from its KV cache;
for MLA the latent and RoPE key meshfold caches, [T, 1, r + rope], as both).

  hf_checkpoint.py --load DIR LAYERS PROMPTS.txt REF.safetensors

runs the forward of the folder DIR as it is instead. An fp8 folder (its
config's quantization_config) is loaded with transformers' fine-grained
fp8 support dequantizing the weights (FineGrainedFP8Config(dequantize=True)).

Options before the arguments, for DeepSeek-V3's routing:
  --bias-mean M   draws e_score_correction_bias as M + 0.1 N(0, 1) (default
                  M = 0); with M = -0.8 every choice score is negative.
  --tied-router   makes every routing choice an exact tie: the routers'
                  gates are zero (every score sigmoid(0) = 0.5 exactly) and
                  the bias repeats [0.1, 0.1, 0.1, 0, ...] in every group, so
                  all groups score alike and six experts of the kept groups
                  share the best score. torch.topk's pick among ties is its
                  algorithm's; its CUDA kernel keeps the first (lowest
                  index) of the values equal to the k-th, and the forward
                  runs with torch.topk keeping the same (a stable sort).
"""

import json
import sys

import torch
from safetensors.torch import save_file
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def cache_layer(cache, i):
    """Layer i's (keys, values) [1, n_kv, T, d_h] in transformers 4 or 5
    (a Cache object, or the legacy tuple of per-layer pairs)."""
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    if hasattr(cache, "key_cache"):
        return cache.key_cache[i], cache.value_cache[i]
    return cache[i][0], cache[i][1]


def f32_dtype():
    """from_pretrained's argument for f32 (renamed in transformers 5)."""
    return ({"dtype": torch.float32}
            if int(transformers.__version__.split(".")[0]) >= 5
            else {"torch_dtype": torch.float32})


def first_ties_topk(input, k, dim=-1, largest=True, sorted=True):
    """torch.topk keeping the lowest indices among the values equal to the
    k-th, as torch's CUDA kernel does (its CPU kernel's pick depends on its
    selection algorithm)."""
    values, indices = torch.sort(input, dim=dim, descending=largest,
                                 stable=True)
    return torch.return_types.topk(
        (values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))


def take_option(name, has_value):
    """Removes `name` (and its value) from sys.argv; returns the value, True
    for a flag, or None when absent."""
    if name not in sys.argv:
        return None
    i = sys.argv.index(name)
    value = sys.argv[i + 1] if has_value else True
    del sys.argv[i:i + (2 if has_value else 1)]
    return value


def main():
    bias_mean = float(take_option("--bias-mean", True) or 0.0)
    tied = take_option("--tied-router", False)
    if sys.argv[1] == "--load":
        out_dir, layers, prompts, ref = sys.argv[2:6]
        config = AutoConfig.from_pretrained(out_dir)
        extra = {}
        if getattr(config, "quantization_config", None):
            from transformers import FineGrainedFP8Config
            extra["quantization_config"] = FineGrainedFP8Config(
                dequantize=True)
        model = AutoModelForCausalLM.from_pretrained(
            out_dir, **f32_dtype(), **extra).eval()
        forward(model, config, int(layers), prompts, ref)
        return
    config_path, layers, out_dir, shard_size, prompts, ref = sys.argv[1:7]
    dtype = getattr(torch, sys.argv[7] if len(sys.argv) > 7 else "float32")
    with open(config_path) as f:
        fields = json.load(f)
    fields["num_hidden_layers"] = int(layers)
    torch.manual_seed(1)
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.rand_like(p))
            elif name.endswith(".bias"):
                # transformers zeroes biases at init: draw them, so that
                # the check sees them.
                p.copy_(0.5 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                # DeepSeek-V3's routing bias (a buffer, zero at init).
                b.copy_(bias_mean + 0.1 * torch.randn_like(b))
                if tied:
                    size = b.numel() // config.n_group
                    pattern = torch.zeros(size)
                    pattern[:3] = 0.1
                    b.copy_(pattern.repeat(config.n_group))
        if tied:
            for layer in model.model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None:
                    gate.weight.zero_()
            torch.topk = first_ties_topk
    model = model.to(dtype)
    model.save_pretrained(out_dir, max_shard_size=shard_size)
    # The forward runs in f32 on the values as saved (rounded to dtype), the
    # folder loaded back by transformers (a fresh model: casting this one back
    # would leave its RoPE frequencies rounded to dtype).
    model = AutoModelForCausalLM.from_pretrained(out_dir,
                                                 **f32_dtype()).eval()
    forward(model, config, int(layers), prompts, ref)


def forward(model, config, layers, prompts, ref):
    """Writes the model's forward on each prompt line to REF."""
    # MLA (DeepSeek-V3): the cache meshfold keeps is each token's latent
    # (kv_a_layernorm's output) and roped RoPE key, [T, 1, kv_lora_rank +
    # qk_rope_head_dim], as both k and v.
    mla = getattr(config, "kv_lora_rank", None)
    latents = {}
    if mla:
        for i, layer in enumerate(model.model.layers):
            layer.self_attn.kv_a_layernorm.register_forward_hook(
                lambda m, args, out, i=i: latents.__setitem__(i, out))
    tensors = {}
    for r, line in enumerate(open(prompts).read().splitlines()):
        ids = torch.tensor([[int(t) for t in line.split()]])
        with torch.no_grad():
            out = model(ids, use_cache=True)
        tensors[f"req{r}.logits"] = out.logits[0, -1].contiguous()
        for i in range(layers):
            k, v = cache_layer(out.past_key_values, i)
            if mla:
                # transformers >= 5.x caches the latent and the RoPE key
                # themselves (k [1, 1, T, r], v [1, 1, T, rope]); earlier
                # versions cache per-head K and V, the RoPE key K's tail.
                rope = (v[0, 0] if k.shape[-1] == mla
                        else k[0, 0, :, config.qk_nope_head_dim:])
                kv = torch.cat([latents[i][0], rope], dim=-1)[:, None, :]
                tensors[f"req{r}.layers.{i}.k"] = kv.contiguous()
                tensors[f"req{r}.layers.{i}.v"] = kv.clone()
                continue
            tensors[f"req{r}.layers.{i}.k"] = k[0].transpose(0, 1).contiguous()
            tensors[f"req{r}.layers.{i}.v"] = v[0].transpose(0, 1).contiguous()
    save_file(tensors, ref)


main()
