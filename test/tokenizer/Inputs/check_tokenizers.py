"""Trains small BPE tokenizers with Hugging Face `tokenizers` in the shapes
real checkpoints ship (GPT-2 byte level, Qwen2, Llama 3, Mixtral's byte
fallback, Metaspace), saves each as tokenizer.json, and checks that
meshfold-tokenize gives the same ids as `tokenizers`' own encode (special
tokens added) and the same text as its decode (special tokens skipped), line
by line, on the prompts file.

usage: check_tokenizers.py TOOL PROMPTS.txt TRAIN.txt WORKDIR
"""
import json
import os
import subprocess
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                        normalizers, pre_tokenizers, processors, trainers)

QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def unescape(line):
    out, i = [], 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[line[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def run_tool(tool, tokenizer, prompts, work, name):
    """meshfold-tokenize's ids for the prompts file, and its decoding of
    them."""
    ids_file = os.path.join(work, name + ".ids")
    subprocess.run([tool, "--tokenizer", tokenizer, prompts, "-o", ids_file],
                   check=True)
    with open(ids_file) as f:
        ours = [[int(x) for x in l.split()] for l in f]
    text_file = os.path.join(work, name + ".text")
    subprocess.run([tool, "--tokenizer", tokenizer, "--decode", ids_file,
                    "-o", text_file], check=True)
    with open(text_file, encoding="utf-8") as f:
        decoded = [unescape(l.rstrip("\n")) for l in f]
    return ours, decoded


def compare(name, peer, lines, ours, theirs, decoded, expected, what):
    """Prints the first differences and a summary line; returns how many
    lines differ."""
    bad = [i for i in range(len(lines))
           if i >= len(ours) or ours[i] != theirs[i]]
    bad_text = [i for i in range(len(lines))
                if i >= len(decoded) or decoded[i] != expected[i]]
    for i in bad[:3]:
        print("%s: line %d: %r\n  ours   %s\n  theirs %s" % (
            name, i + 1, lines[i], ours[i] if i < len(ours) else None,
            theirs[i]))
    for i in bad_text[:3]:
        print("%s: line %d decodes to %r, %s: %r" % (
            name, i + 1, decoded[i] if i < len(decoded) else None, peer,
            expected[i]))
    print("%s: %d lines, %d tokens%s, ids %s, text %s" % (
        name, len(lines), sum(map(len, theirs)), what,
        "equal" if not bad else "DIFFER on %d" % len(bad),
        "equal" if not bad_text else "DIFFERS on %d" % len(bad_text)))
    return len(bad) + len(bad_text)


def gpt2(train):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.train([train], trainers.BpeTrainer(
        vocab_size=1200, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def qwen2(train):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train([train], trainers.BpeTrainer(
        vocab_size=1500,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False)])
    tok.add_tokens([AddedToken("meshfold", single_word=True, normalized=True)])
    return tok


def llama3(train):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train([train], trainers.BpeTrainer(
        vocab_size=1500,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def with_byte_tokens(tok):
    """The trained tokenizer with <0x00>..<0xFF> in its model's vocabulary
    after <unk>, <s> and </s> (as Mixtral's), ids renumbered."""
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    specials = ["<unk>", "<s>", "</s>"]
    order = specials + ["<0x%02X>" % b for b in range(256)]
    order += [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])
              if t not in specials]
    spec["model"]["vocab"] = {t: i for i, t in enumerate(order)}
    for added in spec["added_tokens"]:
        added["id"] = spec["model"]["vocab"][added["content"]]
    return Tokenizer.from_str(json.dumps(spec))


def mixtral(train):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(),
        decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.train([train], trainers.BpeTrainer(
        vocab_size=1000, special_tokens=["<unk>", "<s>", "</s>"],
        limit_alphabet=120))
    tok = with_byte_tokens(tok)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def metaspace(train):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="first", split=True)
    tok.decoder = decoders.Sequence([decoders.Metaspace(
        replacement="\u2581", prepend_scheme="first"), decoders.ByteFallback()])
    tok.train([train], trainers.BpeTrainer(
        vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"],
        limit_alphabet=100))
    tok = with_byte_tokens(tok)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")),
                        ("</s>", tok.token_to_id("</s>"))])
    return tok


def main():
    tool, prompts, train, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    with open(prompts, encoding="utf-8") as f:
        lines = [unescape(l.rstrip("\n")) for l in f]
    failures = 0
    for make in (gpt2, qwen2, llama3, mixtral, metaspace):
        name = make.__name__
        tok = make(train)
        path = os.path.join(work, name + ".json")
        tok.save(path)
        ours, decoded = run_tool(tool, path, prompts, work, name)
        theirs = [tok.encode(l).ids for l in lines]
        expected = [tok.decode(t, skip_special_tokens=True) for t in theirs]
        fallback = sum(1 for t in theirs for i in t
                       if tok.id_to_token(i).startswith("<0x"))
        failures += compare(name, "tokenizers", lines, ours, theirs, decoded,
                            expected, " (%d byte-fallback)" % fallback)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
