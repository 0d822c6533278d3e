"""Helper of bench/cpu-vs-llamacpp.sh, run in the bench venv.

  cpu-vs-llamacpp.py tokenizer DIR VOCAB

writes DIR/tokenizer.json and DIR/tokenizer_config.json: a Llama-style
byte-fallback BPE (Hugging Face tokenizers' format, as Mistral and Mixtral
ship theirs): <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF>, no merges,
the rest of the VOCAB ids filled with unused [PAD<i>] pieces, so that
llama.cpp's convert_hf_to_gguf.py takes it as a Llama tokenizer (its
LlamaHfVocab path) with the model's vocabulary size. Every text encodes to
byte tokens; the benchmark feeds token ids on both sides, so the tokenizer
plays no part in the timings.
"""
import json
import sys
from pathlib import Path


def tokenizer(folder: Path, vocab_size: int) -> None:
    specials = ["<unk>", "<s>", "</s>"]
    pieces = specials + [f"<0x{b:02X}>" for b in range(256)]
    if vocab_size < len(pieces):
        sys.exit(f"cpu-vs-llamacpp.py: vocabulary {vocab_size} under {len(pieces)}")
    pieces += [f"[PAD{i}]" for i in range(len(pieces), vocab_size)]
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, s in enumerate(specials)]
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {p: i for i, p in enumerate(pieces)}, "merges": []},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 32768,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                 for t in added},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "tokenizer":
        tokenizer(Path(argv[1]), int(argv[2]))
    else:
        sys.exit("usage: cpu-vs-llamacpp.py tokenizer DIR VOCAB")


if __name__ == "__main__":
    main(sys.argv[1:])
