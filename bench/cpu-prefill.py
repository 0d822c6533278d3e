"""The Hugging Face side of bench/cpu-prefill.sh (run by it in its venv).

  cpu-prefill.py peer CONFIG WEIGHTS PROMPT OUT --threads N --reps R
      MixtralForCausalLM on the prompt's token ids (one line): prints
      `peer_load_s S`, `peer_run_s S` (median of R timed forwards after one
      warm-up) and writes the last position's logits to OUT as `logits`.
  cpu-prefill.py ops T --threads N --reps R
      torch sgemm on the op classes' shapes at T tokens: one line
      `op CLASS FLOPS SECONDS` per class (median of R samples; a sample of
      a short op averages enough calls to last 50 ms).
  cpu-prefill.py check MESHFOLD_OUT PEER_OUT
      next-token argmax and the last position's logits of both.
  cpu-prefill.py info
      torch and transformers versions, oneDNN / MKL, the attention kernel.
"""

import argparse
import gc
import json
import re
import statistics
import sys
import time

import torch


def median_time(fn, reps, min_sample_s=0.0):
    """Median seconds of a call over `reps` samples after a warm-up call; a
    sample times enough calls to last `min_sample_s` (for short ops)."""
    t0 = time.perf_counter()
    fn()  # warm-up
    calls = max(1, int(min_sample_s / max(time.perf_counter() - t0, 1e-9)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def hf_state_dict(weights, model):
    """The checkpoint (HF Mixtral names, one tensor per expert matrix) in the
    names and layout of `model`: transformers 5 calls the block `mlp` and
    stacks the experts into `experts.gate_up_proj` [E, 2*ffn, d] (w1 then w3)
    and `experts.down_proj` [E, d, ffn] (w2)."""
    from safetensors.torch import load_file

    ckpt = load_file(weights)
    want = {k: v.shape for k, v in model.state_dict().items()}
    if set(want) == set(ckpt):
        return ckpt
    out = {}
    for name, shape in want.items():
        if name in ckpt:
            out[name] = ckpt.pop(name)
            continue
        m = re.fullmatch(r"(model\.layers\.\d+)\.mlp\.(.*)", name)
        if not m:
            sys.exit(f"cpu-prefill.py: no checkpoint tensor for '{name}'")
        old, leaf = m.group(1) + ".block_sparse_moe", m.group(2)

        def stack(w):
            keys = [f"{old}.experts.{e}.{w}.weight" for e in range(shape[0])]
            return torch.stack([ckpt.pop(k) for k in keys])

        if leaf == "gate.weight":
            out[name] = ckpt.pop(old + ".gate.weight")
        elif leaf == "experts.gate_up_proj":
            out[name] = torch.cat([stack("w1"), stack("w3")], dim=1)
        elif leaf == "experts.down_proj":
            out[name] = stack("w2")
        else:
            sys.exit(f"cpu-prefill.py: no checkpoint tensor for '{name}'")
        gc.collect()
    for name, t in out.items():
        if t.shape != want[name]:
            sys.exit(f"cpu-prefill.py: '{name}' is {tuple(t.shape)} from the "
                     f"checkpoint, {tuple(want[name])} in the model")
    if ckpt:
        sys.exit("cpu-prefill.py: checkpoint tensors the model lacks: " +
                 ", ".join(sorted(ckpt)[:5]))
    return out


def build_model(config, weights):
    """The model with the checkpoint's weights, built on the meta device so
    that only one copy of the weights is ever in memory; the buffers that
    are not in a state dict (RoPE's inverse frequencies) are made anew."""
    from transformers import MixtralForCausalLM

    with torch.device("meta"):
        model = MixtralForCausalLM(config)
    model.load_state_dict(hf_state_dict(weights, model), strict=True,
                          assign=True)
    for name, module in list(model.named_modules()):
        if any(b.is_meta for b in module.buffers(recurse=False)):
            if not type(module).__name__.endswith("RotaryEmbedding"):
                sys.exit(f"cpu-prefill.py: buffer of '{name}' not loaded")
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, type(module)(config))
    if any(t.is_meta for t in list(model.parameters()) + list(model.buffers())):
        sys.exit("cpu-prefill.py: some weights were not loaded")
    return model.to(torch.float32).eval()


def peer(args):
    from transformers import MixtralConfig
    from safetensors.torch import save_file

    torch.set_num_threads(args.threads)
    with open(args.config) as f:
        config = MixtralConfig(**json.load(f))
    ids = [int(t) for t in open(args.prompt).read().split()]
    input_ids = torch.tensor([ids], dtype=torch.long)

    t0 = time.perf_counter()
    model = build_model(config, args.weights)
    gc.collect()
    print(f"peer_load_s {time.perf_counter() - t0:.6f}")
    print(f"peer_attn {model.config._attn_implementation}")

    def forward():
        with torch.no_grad():
            return model(input_ids, use_cache=True, logits_to_keep=1).logits

    print(f"peer_run_s {median_time(forward, args.reps):.6f}")
    logits = forward()[0, -1].contiguous()
    save_file({"logits": logits}, args.out)


def ops(args):
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t = args.tokens
    d, ffn, n_exp, top_k, heads, kv, dh, vocab = (1024, 2816, 8, 2, 16, 8, 64,
                                                  32000)
    r = torch.randn
    x = r(t, d)
    wq, wkv = r(heads * dh, d), r(kv * dh, d)
    slots = t * top_k // n_exp
    xe, he = r(slots, d), r(slots, ffn)
    w1, w2 = r(ffn, d), r(d, ffn)
    wg = r(n_exp, d)
    q, k, v = r(heads, t, dh), r(heads, t, dh), r(heads, t, dh)
    kt = k.transpose(1, 2).contiguous()
    p = r(heads, t, t)
    xl, wl = r(1, d), r(vocab, d)
    causal = 2 * 2 * heads * dh * t * (t + 1) // 2

    def run(name, flops, fns):
        secs = sum(median_time(fn, args.reps, 0.05) for fn in fns)
        print(f"op {name} {flops} {secs:.9f}")

    run("linear", 2 * t * d * (2 * heads * dh + 2 * kv * dh),
        [lambda: F.linear(x, wq), lambda: F.linear(x, wkv)] * 2)
    run("router", 2 * t * d * n_exp, [lambda: F.linear(x, wg)])
    run("experts", 2 * n_exp * slots * d * ffn * 3,
        [lambda: F.linear(xe, w1), lambda: F.linear(xe, w1),
         lambda: F.linear(he, w2)] * n_exp)
    # The full square, as sgemm computes it; and the causal attention that
    # transformers runs (scaled_dot_product_attention), by its causal flops.
    run("attention-matmul", 2 * 2 * heads * dh * t * t,
        [lambda: torch.matmul(q, kt), lambda: torch.matmul(p, v)])
    run("attention-sdpa", causal,
        [lambda: F.scaled_dot_product_attention(q[None], k[None], v[None],
                                                is_causal=True)])
    run("lm_head", 2 * d * vocab, [lambda: F.linear(xl, wl)])


def check(args):
    from safetensors.torch import load_file

    mf = load_file(args.meshfold)
    peer_logits = load_file(args.peer)["logits"]
    names = [n for n in mf if n.endswith(".logits")]
    if not names:
        sys.exit("cpu-prefill.py: no req*.logits in " + args.meshfold)
    mf_logits = mf[sorted(names)[0]].reshape(-1).to(torch.float32)
    if mf_logits.shape != peer_logits.shape:
        sys.exit(f"cpu-prefill.py: logits {tuple(mf_logits.shape)} vs "
                 f"{tuple(peer_logits.shape)}")
    a, b = int(mf_logits.argmax()), int(peer_logits.argmax())
    err = float((mf_logits - peer_logits).abs().max())
    scale = float(peer_logits.abs().max())
    print(f"check_argmax {a} {b}")
    print(f"check_max_abs_err {err:.3e}")
    print(f"check_rel_err {err / max(scale, 1e-30):.3e}")
    print(f"check_agree {'yes' if a == b else 'no'}")


def info(_):
    import transformers

    print(f"info_torch {torch.__version__}")
    print(f"info_transformers {transformers.__version__}")
    print(f"info_mkldnn {torch.backends.mkldnn.is_available()}")
    print(f"info_mkl {torch.backends.mkl.is_available()}")
    # The build settings that say which BLAS and threading torch uses.
    keys = ("BLAS_INFO", "LAPACK_INFO", "USE_MKL", "USE_MKLDNN", "USE_OPENMP")
    settings = re.findall(r"(\w+)=([^,\s]*)", torch.__config__.show())
    print("info_config " + ",".join(f"{k}={v}" for k, v in settings
                                    if k in keys))
    print(f"info_threads {torch.get_num_threads()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("peer")
    for a in ("config", "weights", "prompt", "out"):
        p.add_argument(a)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--reps", type=int, default=3)
    p.set_defaults(fn=peer)
    p = sub.add_parser("ops")
    p.add_argument("tokens", type=int)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--reps", type=int, default=3)
    p.set_defaults(fn=ops)
    p = sub.add_parser("check")
    p.add_argument("meshfold")
    p.add_argument("peer")
    p.set_defaults(fn=check)
    p = sub.add_parser("info")
    p.set_defaults(fn=info)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
