"""Quantizes a checkpoint's matrices to fp8 e4m3 in 128 x 128 blocks, as
DeepSeek-V3's checkpoints store them, with ml_dtypes (the JAX project's
float8_e4m3fn): each block becomes round(w / s) in e4m3 with
s = max|w| / 448, and `<name>_scale_inv` holds s (which multiplies the block
back). Writes the fp8 checkpoint and the same weights dequantized to f32
(e4m3 value times s, in f32), which a program must equal.

Quantized are the 2-D weights of the layers, except the router's
(`mlp.gate.weight`) and the shared expert's gate, as in the published fp8
checkpoints; the embedding, the head, the norms and biases stay as they are.

  fp8_quantize.py IN OUT_FP8 OUT_DEQ [--break KIND]

--break writes a broken fp8 checkpoint instead (for the loaders' errors):
`missing-scale` drops one scale, `scale-shape` gives one the shape of
64 x 64 blocks, `scale-dtype` stores one as I32, `vector` stores a norm as
fp8 (with a scale).
"""

import argparse
import json
import struct

import ml_dtypes
import numpy as np

DTYPES = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16,
          "I64": np.int64, "I32": np.int32, "F8_E4M3": ml_dtypes.float8_e4m3fn}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=DTYPES[info["dtype"]])
        out[name] = a.reshape(info["shape"])
    return out


def write(path, tensors):
    header, chunks, at = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def quantized(name, a):
    return (a.ndim == 2 and name.startswith("model.layers.") and
            name.endswith(".weight") and not name.endswith(".mlp.gate.weight")
            and not name.endswith("shared_expert_gate.weight"))


def quantize(w):
    w = w.astype(np.float32)
    rows, cols = w.shape
    sr, sc = -(-rows // 128), -(-cols // 128)
    q = np.zeros(w.shape, dtype=ml_dtypes.float8_e4m3fn)
    s = np.zeros((sr, sc), dtype=np.float32)
    deq = np.zeros(w.shape, dtype=np.float32)
    for i in range(sr):
        for j in range(sc):
            block = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = np.float32(np.abs(block).max())
            scale = amax / np.float32(448) if amax > 0 else np.float32(1)
            qb = (block / scale).astype(ml_dtypes.float8_e4m3fn)
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = qb
            deq[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (
                qb.astype(np.float32) * scale)
            s[i, j] = scale
    return q, s, deq


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input")
    p.add_argument("fp8")
    p.add_argument("dequantized")
    p.add_argument("--break", dest="broken",
                   choices=["missing-scale", "scale-shape", "scale-dtype",
                            "vector"])
    args = p.parse_args()
    fp8, deq, count = {}, {}, 0
    for name, a in read(args.input).items():
        if quantized(name, a):
            q, s, d = quantize(a)
            fp8[name], fp8[name + "_scale_inv"], deq[name] = q, s, d
            count += 1
        else:
            fp8[name] = deq[name] = a
    if args.broken:
        names = sorted(n for n in fp8 if n.endswith("_scale_inv"))
        first = names[0][:-len("_scale_inv")]
        if args.broken == "missing-scale":
            del fp8[first + "_scale_inv"]
        elif args.broken == "scale-shape":
            rows, cols = fp8[first].shape
            fp8[first + "_scale_inv"] = np.ones(
                (-(-rows // 64), -(-cols // 64)), dtype=np.float32)
        elif args.broken == "scale-dtype":
            fp8[first + "_scale_inv"] = fp8[first + "_scale_inv"].astype(
                np.int32)
        elif args.broken == "vector":
            norm = sorted(n for n in fp8 if n.endswith("input_layernorm.weight"))[0]
            fp8[norm] = fp8[norm].astype(ml_dtypes.float8_e4m3fn)
            fp8[norm + "_scale_inv"] = np.ones((1,), dtype=np.float32)
    write(args.fp8, fp8)
    if not args.broken:
        write(args.dequantized, deq)
    print(f"fp8_quantize: {count} matrices in fp8")


if __name__ == "__main__":
    main()
