"""Text in, text out by Hugging Face transformers itself, for comparison with
the emitted program's --prompts-text / --out-jsonl:

  hf_text_generate.py save CONFIG.json LAYERS TOKENIZER.json PROMPTS.txt DIR
      writes a checkpoint folder: MixtralForCausalLM(config) with LAYERS
      layers (seeded random weights, f32, vocabulary of the tokenizer, its
      <s> as BOS and <|endoftext|> as EOS) saved by save_pretrained in
      shards, with the tokenizer.json beside it; generation_config.json's
      eos_token_id becomes a list that also holds the third token the model
      generates for the first prompt, so that a request stops at an EOS;
  hf_text_generate.py generate DIR PROMPTS.txt N OUT.jsonl
      loads DIR with from_pretrained and PreTrainedTokenizerFast, encodes each
      prompt line (the program's escapes: \\n \\t \\r \\\\), runs greedy
      generate() for up to N tokens (stopping at EOS, which is kept), decodes
      the new ids (special tokens skipped, no clean-up) and writes one JSON
      line per request with the program's fields.
"""

import json
import shutil
import sys

import torch
from transformers import (MixtralConfig, MixtralForCausalLM,
                          PreTrainedTokenizerFast)


def unescape(line):
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[line[i + 1]])
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def encode(tokenizer, text):
    return torch.tensor([tokenizer(text)["input_ids"]])


def greedy(model, input_ids, n, eos):
    with torch.no_grad():
        return model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids),
            max_new_tokens=n, do_sample=False, eos_token_id=eos,
            pad_token_id=eos[0])[0, input_ids.shape[1]:].tolist()


def save(config_path, layers, tokenizer_path, prompts, out_dir):
    with open(config_path) as f:
        fields = json.load(f)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_path)
    fields.update(num_hidden_layers=int(layers),
                  vocab_size=len(tokenizer),
                  bos_token_id=tokenizer.convert_tokens_to_ids("<s>"),
                  eos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    torch.manual_seed(3)
    model = MixtralForCausalLM(MixtralConfig(**fields)).to(torch.float32)
    first = open(prompts, encoding="utf-8").read().splitlines()[0]
    third = greedy(model.eval(), encode(tokenizer, unescape(first)), 3,
                   [fields["eos_token_id"]])[-1]
    model.generation_config.eos_token_id = [fields["eos_token_id"], third]
    model.save_pretrained(out_dir, max_shard_size="300KB")
    shutil.copy(tokenizer_path, out_dir + "/tokenizer.json")


def generate(folder, prompts, n, out_path):
    model = MixtralForCausalLM.from_pretrained(
        folder, torch_dtype=torch.float32).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=folder + "/tokenizer.json")
    eos = model.generation_config.eos_token_id
    eos = eos if isinstance(eos, list) else [eos]
    with open(out_path, "w", encoding="utf-8") as out:
        lines = open(prompts, encoding="utf-8").read().splitlines()
        for r, line in enumerate(lines):
            text = unescape(line)
            input_ids = encode(tokenizer, text)
            new = greedy(model, input_ids, int(n), eos)
            finish = "stop" if new and new[-1] in eos else "length"
            out.write(json.dumps({
                "request": r, "prompt": text,
                "prompt_tokens": input_ids[0].tolist(),
                "tokens": new,
                "text": tokenizer.decode(new, skip_special_tokens=True,
                                         clean_up_tokenization_spaces=False),
                "finish_reason": finish}, ensure_ascii=False,
                separators=(",", ":")) + "\n")


if sys.argv[1] == "save":
    save(*sys.argv[2:7])
else:
    generate(*sys.argv[2:6])
