"""Load for bench/serve.sh: N concurrent clients, each sending R streamed
completions one after the other to an OpenAI-compatible server
(/v1/completions, token-id prompts, temperature 0, ignore_eos, max_tokens
M), over plain HTTP (the standard library only, so that both servers see
the same client). Prints one JSON line: requests/s, output tokens/s, and the
p50/p99 of the time to first token and of the gaps between streamed chunks
(inter-token latency), in ms, plus the mean time per output token after the
first (TPOT).

  serve-load.py --url http://127.0.0.1:PORT --model NAME --clients N
                --requests R --prompt-len P --max-tokens M --vocab V
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100.0 * (len(v) - 1))))]


def one_request(url, body, timeout):
    """Streams one completion; returns (first-chunk time, chunk times)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:200]))
    times = []
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[len("data: "):])
        choices = chunk.get("choices") or []
        if choices and choices[0].get("text"):
            times.append(time.perf_counter() - start)
    conn.close()
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--prompt-len", type=int, required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--timeout", type=float, default=600)
    a = p.parse_args()
    ttft, gaps, tpot, errors = [], [], [], []
    lock = threading.Lock()

    def client(c):
        for r in range(a.requests):
            k = c * a.requests + r
            prompt = [3 + (k * 131 + i * 7919 + 11) % (a.vocab - 3)
                      for i in range(a.prompt_len)]
            body = {"model": a.model, "prompt": prompt,
                    "max_tokens": a.max_tokens, "temperature": 0,
                    "stream": True, "ignore_eos": True}
            try:
                times = one_request(a.url, body, a.timeout)
            except Exception as e:  # counted, reported
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                if times:
                    ttft.append(times[0])
                    gaps.extend(b - x for x, b in zip(times, times[1:]))
                    tpot.append((times[-1] - times[0]) / max(1, a.max_tokens - 1))

    # One short request first: page faults and first-touch allocations of
    # the server are not the load's.
    one_request(a.url, {"model": a.model, "prompt": [5, 6, 7], "max_tokens": 4,
                        "temperature": 0, "stream": True, "ignore_eos": True},
                a.timeout)
    threads = [threading.Thread(target=client, args=(c,))
               for c in range(a.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = len(ttft)
    print(json.dumps({
        "clients": a.clients, "requests": done, "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": round(wall, 3),
        "req_per_s": round(done / wall, 3),
        "out_tok_per_s": round(done * a.max_tokens / wall, 2),
        "ttft_p50_ms": round(1000 * percentile(ttft, 50), 1),
        "ttft_p99_ms": round(1000 * percentile(ttft, 99), 1),
        "itl_p50_ms": round(1000 * percentile(gaps, 50), 1),
        "itl_p99_ms": round(1000 * percentile(gaps, 99), 1),
        "tpot_mean_ms": round(1000 * sum(tpot) / max(1, len(tpot)), 1),
    }))


main()
