"""Checks that each --out-jsonl line's tokens equal req{r}.tokens (int32) of
the program's safetensors output. usage: check-jsonl.py OUT.jsonl OUT.safetensors"""
import json
import struct
import sys

lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
data = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
body = data[8 + n:]
for line in lines:
    info = header["req%d.tokens" % line["request"]]
    assert info["dtype"] == "I32", info
    b, e = info["data_offsets"]
    ids = list(struct.unpack("<%di" % ((e - b) // 4), body[b:e]))
    if ids != line["tokens"]:
        sys.exit("request %d: jsonl %s, safetensors %s" % (
            line["request"], line["tokens"], ids))
print("%d requests: tokens equal to req{r}.tokens" % len(lines))
