"""Trains SentencePiece models with Debian's spm_train (a BPE model with byte
fallback, as Llama 2 and Mixtral ship, and a unigram model), and checks that
meshfold-tokenize gives the ids of SentencePiece's own Python encoder with
BOS (and EOS where tokenizer_config.json asks for it) and its decoded text,
line by line, on the prompts file.

usage: check_sentencepiece.py TOOL SPM_TRAIN PROMPTS.txt TRAIN.txt WORKDIR
"""
import json
import os
import subprocess
import sys

import sentencepiece as spm

from check_tokenizers import compare, run_tool, unescape


def main():
    tool, spm_train, prompts, train, work = sys.argv[1:6]
    with open(prompts, encoding="utf-8") as f:
        lines = [unescape(l.rstrip("\n")) for l in f]
    failures = 0
    for kind, config in (("bpe", {}), ("unigram", {"add_bos_token": False,
                                                    "add_eos_token": True})):
        folder = os.path.join(work, kind)
        os.makedirs(folder, exist_ok=True)
        subprocess.run([spm_train, "--input=" + train, "--model_prefix=" +
                        os.path.join(folder, "tokenizer"), "--vocab_size=700",
                        "--model_type=" + kind, "--byte_fallback=true",
                        "--character_coverage=0.995", "--minloglevel=2"],
                       check=True, capture_output=True)
        if config:
            with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
                json.dump(config, f)
        sp = spm.SentencePieceProcessor(
            model_file=os.path.join(folder, "tokenizer.model"))
        bos = config.get("add_bos_token", True)
        eos = config.get("add_eos_token", False)
        theirs = [([sp.bos_id()] if bos else []) + sp.encode(l) +
                  ([sp.eos_id()] if eos else []) for l in lines]
        ours, decoded = run_tool(tool, folder, prompts, work, kind)
        expected = [sp.decode(t) for t in theirs]
        failures += compare(kind, "sentencepiece", lines, ours, theirs,
                            decoded, expected,
                            ", bos %s eos %s" % (bos, eos))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
