"""Soak for bench/serve.sh: N requests to a meshfold --serve from C
concurrent clients, random prompt lengths and max_tokens, 10% cancelled
(the client closes the stream after its first chunk), 5% malformed (bad
JSON, a field of the wrong type, max_tokens 0), the rest streamed or not
with ignore_eos. Checks that nothing is lost: every well-formed request
that was not cancelled comes back whole (HTTP 200, max_tokens tokens), every
malformed one gets HTTP 400, and the server still answers /health. Reads
the server's RSS (/proc/PID/status) after the first 100 requests and at the
end. Prints one JSON line; exits 1 if anything was lost.

  serve-soak.py --url URL --model NAME --pid PID --requests N --clients C
"""
import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse


def rss_mb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def post(url, body, stream_close=False):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if stream_close:
        resp.fp.readline()  # the first line of the first chunk
        conn.close()
        return resp.status, None
    data = resp.read()
    conn.close()
    return resp.status, data


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    a = p.parse_args()
    rng = random.Random(7)
    jobs = []
    for k in range(a.requests):
        kind = rng.random()
        n = rng.randint(1, 48)
        prompt = [3 + rng.randrange(a.vocab - 3) for _ in range(rng.randint(1, 200))]
        body = {"model": a.model, "prompt": prompt, "max_tokens": n,
                "temperature": rng.choice([0, 0.8]), "seed": k,
                "stream": rng.random() < 0.5, "ignore_eos": True}
        if kind < 0.05:
            bad = rng.randrange(3)
            text = ('{"prompt": [1, 2' if bad == 0 else
                    json.dumps(dict(body, temperature="hot")) if bad == 1 else
                    json.dumps(dict(body, max_tokens=0)))
            jobs.append(("malformed", text, n))
        elif kind < 0.15:
            jobs.append(("cancelled", json.dumps(dict(body, stream=True)), n))
        else:
            jobs.append(("whole", json.dumps(body), n))
    counts = {"whole": 0, "cancelled": 0, "malformed": 0}
    lost = []
    rss = {}
    lock = threading.Lock()
    next_job = [0]

    def check(kind, text, n):
        if kind == "cancelled":
            status, _ = post(a.url, text, stream_close=True)
            return status == 200
        status, data = post(a.url, text)
        if kind == "malformed":
            return status == 400 and b'"error"' in data
        if status != 200:
            return False
        if json.loads(text)["stream"]:
            chunks = [json.loads(l[6:]) for l in data.decode().split("\n")
                      if l.startswith("data: {")]
            return data.decode().rstrip().endswith("data: [DONE]") and \
                chunks[-1]["choices"][0]["finish_reason"] == "length"
        doc = json.loads(data)
        return doc["usage"]["completion_tokens"] == n

    def client():
        while True:
            with lock:
                k = next_job[0]
                next_job[0] += 1
                if k == 100:
                    rss["first"] = rss_mb(a.pid)
            if k >= len(jobs):
                return
            kind, text, n = jobs[k]
            try:
                ok = check(kind, text, n)
            except Exception as e:
                ok = False
                text = "%s (%s)" % (text[:80], e)
            with lock:
                counts[kind] += 1
                if not ok:
                    lost.append((kind, text[:120]))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    # The cancelled requests' places are freed within a step or two.
    time.sleep(1)
    rss["last"] = rss_mb(a.pid)
    u = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", "/health")
    healthy = conn.getresponse().status == 200
    print(json.dumps({"requests": len(jobs), "whole": counts["whole"],
                      "cancelled": counts["cancelled"],
                      "malformed": counts["malformed"], "lost": len(lost),
                      "first_lost": lost[0] if lost else None,
                      "healthy_after": healthy, "wall_s": round(wall, 1),
                      "rss_mb_after_100": round(rss.get("first", 0), 1),
                      "rss_mb_last": round(rss["last"], 1)}))
    return 0 if not lost and healthy else 1


raise SystemExit(main())
