"""Writes varied text prompts, one per line in the --prompts-text format
(backslash escapes for newline, tab, carriage return and backslash): ASCII
prose and code, numbers, contractions, accents (composed and decomposed),
Cyrillic, Arabic, CJK, emoji (with ZWJ sequences and flags), whitespace runs
and special tokens written inline. Deterministic: the same file every run.

usage: corpus.py LINES OUT.txt [TRAIN.txt]
(TRAIN gets plain training text for the tokenizers, one sample per line.)
"""
import random
import sys

WORDS = ("the quick brown fox jumps over lazy dog mesh fold expert router "
         "tensor parallel context pipeline token prompt attention layer "
         "gradient compiler kernel shard rank collective dispatch combine "
         "Hello World MoE Mixtral Qwen DeepSeek GPU NVLink").split()
CONTRACTIONS = ["don't", "I'll", "we've", "they're", "it's", "she'd", "I'm",
                "DON'T", "You'LL"]
ACCENTED = ["café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström",
            "A\u030angstro\u0308m", "résumé", "ﬁancé", "Straße", "ǅemal"]
CYRILLIC = ["Привет", "мир", "модель", "эксперт"]
ARABIC = ["مرحبا", "بالعالم", "نموذج"]
CJK = ["你好", "世界", "模型并行", "専門家", "こんにちは", "カタカナ", "한국어",
       "龘", "𠀋", "中文分词测试"]
EMOJI = ["😀", "🚀", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "🏳️\u200d🌈", "❤️", "🤖",
         "🧑\u200d💻"]
SPECIAL = ["<s>", "</s>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
           "<mask>", "meshfold", "<unk>"]
CODE = ["def f(x):\n    return x**2", "for (int i = 0; i < n; ++i) {}",
        "x = [1, 2, 3]  # list", "if a != b && c >= d:", "print(\"hi\\n\")",
        "SELECT * FROM t WHERE id=42;", "<div class=\"a\">b</div>"]
SPACES = ["  ", "   ", "\t", " \t ", "\n", "\n\n", "    ", "\r\n", "\u00a0",
          "\u3000", "\u2003"]


def word(rng):
    kind = rng.random()
    if kind < 0.45:
        w = rng.choice(WORDS)
        return w.capitalize() if rng.random() < 0.2 else w
    if kind < 0.52:
        return rng.choice(CONTRACTIONS)
    if kind < 0.60:
        return str(rng.randint(0, 10 ** rng.randint(1, 9)))
    if kind < 0.66:
        return rng.choice(ACCENTED)
    if kind < 0.70:
        return rng.choice(CYRILLIC)
    if kind < 0.73:
        return rng.choice(ARABIC)
    if kind < 0.82:
        return "".join(rng.choice(CJK) for _ in range(rng.randint(1, 3)))
    if kind < 0.88:
        return rng.choice(EMOJI)
    if kind < 0.93:
        return rng.choice(SPECIAL)
    if kind < 0.96:
        return rng.choice(CODE)
    return rng.choice(".,;:!?-()[]{}\"'/@#$%^&*+=~`|<>") * rng.randint(1, 3)


def sentence(rng):
    parts = []
    for _ in range(rng.randint(1, 18)):
        parts.append(word(rng))
        parts.append(rng.choice(SPACES) if rng.random() < 0.15 else " ")
    text = "".join(parts)
    if rng.random() < 0.3:
        text = text.strip()
    if rng.random() < 0.1:
        text = " " + text
    return text or "x"


def escape(text):
    return (text.replace("\\", "\\\\").replace("\n", "\\n")
            .replace("\r", "\\r").replace("\t", "\\t"))


def main():
    lines = int(sys.argv[1])
    rng = random.Random(20261202)
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        for _ in range(lines):
            out.write(escape(sentence(rng)) + "\n")
    if len(sys.argv) > 3:
        rng = random.Random(7)
        with open(sys.argv[3], "w", encoding="utf-8") as out:
            for _ in range(4 * lines):
                out.write(sentence(rng).replace("\n", " ") + "\n")


if __name__ == "__main__":
    main()
