"""Greedy generation by Hugging Face transformers' own generate() on a
meshfold-gen-weights checkpoint (one tensor per expert matrix, HF Mixtral
names), printed as the emitted program prints it:

  hf_generate.py CONFIG.json WEIGHTS.safetensors PROMPTS.txt N LAYERS
  -> "req R: T tokens -> generated N: ID ..." per prompt line
"""

import json
import re
import sys

import torch
from safetensors.torch import load_file
from transformers import MixtralConfig, MixtralForCausalLM


def state_dict(ckpt, model):
    """The checkpoint in `model`'s names: transformers 5 calls the block
    `mlp` and stacks the experts (gate_up_proj = w1 then w3, down_proj =
    w2); older versions keep the checkpoint's names."""
    want = model.state_dict()
    if set(want) == set(ckpt):
        return ckpt
    out = {}
    for name, value in want.items():
        if name in ckpt:
            out[name] = ckpt[name]
            continue
        m = re.fullmatch(r"(model\.layers\.\d+)\.mlp\.(.*)", name)
        old, leaf = m.group(1) + ".block_sparse_moe", m.group(2)

        def stack(w):
            return torch.stack([ckpt[f"{old}.experts.{e}.{w}.weight"]
                                for e in range(value.shape[0])])

        out[name] = {"gate.weight": lambda: ckpt[old + ".gate.weight"],
                     "experts.gate_up_proj":
                         lambda: torch.cat([stack("w1"), stack("w3")], dim=1),
                     "experts.down_proj": lambda: stack("w2")}[leaf]()
    return out


def main():
    config_path, weights, prompts, n, layers = sys.argv[1:6]
    with open(config_path) as f:
        fields = json.load(f)
    fields["num_hidden_layers"] = int(layers)
    config = MixtralConfig(**fields)
    torch.manual_seed(0)
    model = MixtralForCausalLM(config).to(torch.float32).eval()
    model.load_state_dict(state_dict(load_file(weights), model), strict=True)
    for r, line in enumerate(open(prompts).read().splitlines()):
        ids = [int(t) for t in line.split()]
        # Every prompt token is real (id 0 included): an explicit mask, or
        # generate() would take the pad id's tokens for padding.
        input_ids = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(input_ids,
                                 attention_mask=torch.ones_like(input_ids),
                                 max_new_tokens=int(n), min_new_tokens=int(n),
                                 do_sample=False, eos_token_id=None,
                                 pad_token_id=0)
        new = out[0, len(ids):].tolist()
        print(f"req {r}: {len(ids)} tokens -> generated {len(new)}: "
              + " ".join(str(t) for t in new))


main()
