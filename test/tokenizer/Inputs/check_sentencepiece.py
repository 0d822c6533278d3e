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

from check_tokenizers import unescape


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
        ids_file = os.path.join(work, kind + ".ids")
        subprocess.run([tool, "--tokenizer", folder, prompts, "-o", ids_file],
                       check=True)
        with open(ids_file) as f:
            ours = [[int(x) for x in l.split()] for l in f]
        text_file = os.path.join(work, kind + ".text")
        subprocess.run([tool, "--tokenizer", folder, "--decode", ids_file,
                        "-o", text_file], check=True)
        with open(text_file, encoding="utf-8") as f:
            decoded = [unescape(l.rstrip("\n")) for l in f]
        expected = [sp.decode(t) for t in theirs]
        bad = [i for i in range(len(lines)) if i >= len(ours) or
               ours[i] != theirs[i]]
        bad_text = [i for i in range(len(lines)) if i >= len(decoded) or
                    decoded[i] != expected[i]]
        for i in bad[:3]:
            print("%s: line %d: %r\n  ours   %s\n  theirs %s" % (
                kind, i + 1, lines[i], ours[i] if i < len(ours) else None,
                theirs[i]))
        for i in bad_text[:3]:
            print("%s: line %d decodes to %r, sentencepiece: %r" % (
                kind, i + 1, decoded[i] if i < len(decoded) else None,
                expected[i]))
        print("%s: %d lines, %d tokens, bos %s eos %s, ids %s, text %s" % (
            kind, len(lines), sum(map(len, theirs)), bos, eos,
            "equal" if not bad else "DIFFER on %d" % len(bad),
            "equal" if not bad_text else "DIFFERS on %d" % len(bad_text)))
        failures += len(bad) + len(bad_text)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
