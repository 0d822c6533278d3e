#!/usr/bin/env bash
# Benchmark (not a test): the paged K/V cache on the seed model (8 layers),
# one rank, compiled with --decode (docs/design.md §6). Three figures, each
# run alternated (A B A B) and the median of N rounds:
#  1. 32 requests of mixed lengths (16 to 1024 tokens, 32 new tokens each):
#     tokens/s and peak memory with the K/V kept as before (every request's
#     K/V outputs, room for T + N - 1 rows allocated at the start, the
#     default) against --no-kv-out (only the paged cache: the blocks of the
#     running requests), beside the cache's own peak (--report decode) and
#     the process's peak RSS (/usr/bin/time), and the paged cache again with
#     at most 8 requests decoding at once (--max-batch 8);
#  2. a 16-token request A, a 4,000-token prompt L, then a 17-token
#     request B, 64 new tokens each, without and with --prefill-chunk 256
#     and 32, and with a step budget (--max-step-tokens 16 and 8 beside
#     chunks of 256): B's time to first token, A's inter-token times (p50,
#     p99: the steps beside L's prefill) and L's time to first token; the
#     ratios are to the unchunked run's B and to its A's p50 (its steady
#     decode: after L's prefill call, 3 rows per step);
#  3. 8 requests sharing a 1,000-token system prompt: time of all prefills
#     and steps without and with --prefix-cache, and request 1's own
#     prefill run alone (--max-batch 1), its prefix cold or cached.
# Times are the program's own (--report decode).
#
#   bench/kv-cache.sh [BUILD_DIR] [N]   (N: pairs, median; default 3)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=3
# shellcheck source=bench/common.sh
. "$here/common.sh"
[ -x /usr/bin/time ] || { echo "$bench_name: needs /usr/bin/time (Debian: time)" >&2; exit 1; }
seed_model_and_weights
"$bin/meshfold-compile" "$work/model.mlir" --decode -o "$work/one"

# run OUT_TXT FLAGS...: the program's report and the process's peak RSS (kB,
# a last line "rss N").
run() {
  local out="$1"; shift
  /usr/bin/time -f 'rss %M' -o "$work/time.txt" "$work/one" --weights "$work/w.safetensors" \
    --out "$work/o.safetensors" --report decode "$@" > "$out"
  cat "$work/time.txt" >> "$out"
}
field() { awk "$1" "$2"; }
rss='/^rss/ { print $2 / 1024 }'
kvmb='/^kv cache:/ { for (i = 1; i <= NF; ++i) if ($i == "MB") print $(i - 1) }'
# awk programs over a --report decode: request R's first token, its own
# prefill, its inter-token p50 and p99 (ms).
req_field() { echo "/^req $1: decode/ { for (i = 1; i <= NF; ++i) if (\$i == \"$2\") print \$(i + $3) }"; }
wall='/^decode:/ { for (i = 1; i <= NF; ++i) if ($i == "ms" && $(i + 2) == "prefills") print $(i - 1) }'

# 1. Mixed lengths.
awk 'BEGIN { for (r = 0; r < 32; ++r) { t = 16 + (r * 337) % 1009; line = ""
  for (i = 0; i < t; ++i) line = line (i ? " " : "") (r * 131 + i * 17) % 512; print line } }' > "$work/mixed.txt"
flags=(--prompts "$work/mixed.txt" --max-new-tokens 32 --ignore-eos)
for i in $(seq "$reps"); do
  run "$work/a$i.txt" "${flags[@]}"
  run "$work/b$i.txt" "${flags[@]}" --no-kv-out
  run "$work/g$i.txt" "${flags[@]}" --no-kv-out --max-batch 8
done
med() { for i in $(seq "$reps"); do field "$1" "$work/$2$i.txt"; done | median; }
rows=$(awk '{ s += NF + 31 } END { print s }' "$work/mixed.txt")
printf 'seed model (8 layers, d 64, 4 KV heads of 8), one rank, medians of %d alternated rounds\n\n' "$reps"
printf '1. 32 requests of 16..1024 tokens (%d rows of K/V with their 31 generated tokens), 32 new tokens each\n' "$rows"
printf '%-34s %10s %14s %12s\n' "" tokens/s "K/V cache MB" "peak RSS MB"
printf '%-34s %10.1f %14.3f %12.1f\n' "K/V outputs kept (as before)" "$(med "$decode_rate" a)" \
  "$(awk -v r="$rows" 'BEGIN { print r * 8 * 4 * 8 * 2 * 4 / 1e6 }')" "$(med "$rss" a)"
printf '%-34s %10.1f %14.3f %12.1f\n' "paged cache only (--no-kv-out)" "$(med "$decode_rate" b)" \
  "$(med "$kvmb" b)" "$(med "$rss" b)"
printf '%-34s %10.1f %14.3f %12.1f\n' "  the same, --max-batch 8" "$(med "$decode_rate" g)" \
  "$(med "$kvmb" g)" "$(med "$rss" g)"
printf '(as before: every request'"'"'s T + N - 1 rows at 8 layers x 4 x 8 x (K, V) x 4 bytes, held\n'
printf 'from the start; paged: the most block storage in use at once, from --report decode)\n\n'

# 2. A long prompt among short ones.
awk 'BEGIN { short = ""; for (i = 0; i < 16; ++i) short = short (i ? " " : "") (i * 29 + 5) % 512; print short
  line = ""; for (i = 0; i < 4000; ++i) line = line (i ? " " : "") (i * 17 + 3) % 512; print line
  print short " 7" }' > "$work/long.txt"
flags=(--prompts "$work/long.txt" --max-new-tokens 64 --ignore-eos)
for i in $(seq "$reps"); do
  run "$work/c$i.txt" "${flags[@]}"
  run "$work/d$i.txt" "${flags[@]}" --prefill-chunk 256
  run "$work/h$i.txt" "${flags[@]}" --prefill-chunk 32
  run "$work/m$i.txt" "${flags[@]}" --prefill-chunk 256 --max-step-tokens 16
  run "$work/n$i.txt" "${flags[@]}" --prefill-chunk 256 --max-step-tokens 8
done
printf '2. requests A (16 tokens), a 4,000-token prompt L, B (17 tokens), 64 new tokens each\n'
printf '%-44s %11s %8s %9s %9s %9s %10s\n' "" "B's TTFT ms" "ratio" "A p50 ms" "A p99 ms" "p99/steady" "L's TTFT ms"
ttft0=$(med "$(req_field 2 first 3)" c)
steady=$(med "$(req_field 0 p50 1)" c)
for x in "c:one prefill call per prompt" "d:--prefill-chunk 256" "h:--prefill-chunk 32" \
    "m:--prefill-chunk 256 --max-step-tokens 16" "n:--prefill-chunk 256 --max-step-tokens 8"; do
  ttft=$(med "$(req_field 2 first 3)" "${x%%:*}")
  p99=$(med "$(req_field 0 p99 1)" "${x%%:*}")
  printf '%-44s %11.3f %8.3f %9.3f %9.3f %9.2fx %10.1f\n' "${x#*:}" "$ttft" \
    "$(awk -v a="$ttft" -v b="$ttft0" 'BEGIN { print a / b }')" "$(med "$(req_field 0 p50 1)" "${x%%:*}")" \
    "$p99" "$(awk -v a="$p99" -v b="$steady" 'BEGIN { print a / b }')" "$(med "$(req_field 1 first 3)" "${x%%:*}")"
done
printf '(ratio: B'"'"'s TTFT to the unchunked run'"'"'s; p99/steady: A'"'"'s p99 to the unchunked run'"'"'s A p50)\n\n'

# 3. A shared system prompt.
awk 'BEGIN { for (r = 0; r < 8; r++) { s = ""; for (p = 0; p < 1000; p++) s = s (p * 37 % 509 + 1) " "
  for (p = 0; p <= r; p++) s = s ((r * 13 + p * 7) % 509 + 1) (p < r ? " " : ""); print s } }' > "$work/shared.txt"
flags=(--prompts "$work/shared.txt" --max-new-tokens 32 --ignore-eos)
for i in $(seq "$reps"); do
  run "$work/e$i.txt" "${flags[@]}"
  run "$work/f$i.txt" "${flags[@]}" --prefix-cache
  run "$work/j$i.txt" "${flags[@]}" --max-batch 1
  run "$work/k$i.txt" "${flags[@]}" --max-batch 1 --prefix-cache
done
printf '3. 8 requests sharing a 1,000-token system prompt, 32 new tokens each\n'
printf '%-34s %17s %10s %22s\n' "" "prefills+steps ms" tokens/s "request 1's prefill ms*"
printf '%-34s %17.1f %10.1f %22.3f\n' "without the prefix cache" "$(med "$wall" e)" "$(med "$decode_rate" e)" \
  "$(med "$(req_field 1 prefill 1)" j)"
printf '%-34s %17.1f %10.1f %22.3f\n' "--prefix-cache" "$(med "$wall" f)" "$(med "$decode_rate" f)" \
  "$(med "$(req_field 1 prefill 1)" k)"
grep '^prefix cache:' "$work/f1.txt"
printf '* with --max-batch 1: the request alone, after request 0 (cold: its whole prompt; cached:\n'
printf '  its 10 rows past the 992 it takes from request 0)\n'
