"""Drives a meshfold program's --serve with the official `openai` client and
checks it against the same program's batch run (its --out-jsonl): greedy
completions equal, streamed or not, with stop strings and logprobs; every
error status; cancellation; the queue limit; the API key; SIGTERM's drain.
Every wait is bounded. Prints one line per check; fails with a message.

  serve-client.py --exe PROGRAM --batch BATCH.jsonl [--only greedy,...] -- FLAGS
"""
import argparse
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai

MODEL = "tiny"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


class Server:
    def __init__(self, exe, flags, extra=()):
        cmd = [exe] + flags + ["--served-model-name", MODEL,
                               "--serve", "127.0.0.1:0"] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        self.banner = line
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            fail("no address from the server: %r %s" %
                 (line, self.proc.stderr.read()))
        self.url = "http://127.0.0.1:%s" % m.group(1)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        else:
            fail("the server did not become ready in 120 s")

    def client(self, key="none"):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key,
                             max_retries=0, timeout=60)

    def metric(self, name):
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        fail("no metric " + name)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("the server did not stop within 60 s of SIGTERM")
        return self.proc.returncode, out, err


def expect_error(status, what, call):
    try:
        call()
    except openai.APIStatusError as e:
        if e.status_code != status:
            fail("%s: HTTP %d, expected %d" % (what, e.status_code, status))
        body = e.body if isinstance(e.body, dict) else {}
        print("%s: %d %s" % (what, status, body.get("message", "")))
        return
    fail("%s: no error, expected HTTP %d" % (what, status))


def raw(url, body, headers=None):
    req = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def check_greedy(server, batch, n):
    c = server.client()
    results = [None] * len(batch)

    def one(i, prompt):
        r = c.completions.create(model=MODEL, prompt=prompt, max_tokens=n,
                                 temperature=0)
        results[i] = (r.choices[0].text, r.choices[0].finish_reason,
                      r.usage.completion_tokens)

    for key in ("prompt", "prompt_tokens"):
        threads = [threading.Thread(target=one, args=(i, b[key]))
                   for i, b in enumerate(batch)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for b, got in zip(batch, results):
            want = (b["text"], b["finish_reason"], len(b["tokens"]))
            if got != want:
                fail("%s %r: got %r, the batch run gave %r" %
                     (key, b[key], got, want))
        print("greedy (%s, %d at once): equal to the batch run" %
              ("text" if key == "prompt" else "token ids", len(batch)))


def check_stream(server, batch, n):
    c = server.client()
    for b in batch:
        chunks = list(c.completions.create(
            model=MODEL, prompt=b["prompt"], max_tokens=n, temperature=0,
            stream=True, stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
        if text != b["text"] or reasons[-1] != b["finish_reason"] or \
                any(reasons[:-1]):
            fail("stream %r: %r %r, batch %r" % (b["prompt"], text, reasons,
                                                 b["text"]))
        if chunks[-1].usage.completion_tokens != len(b["tokens"]):
            fail("stream usage %r" % chunks[-1].usage)
    print("stream: %d prompts, deltas join to the batch text" % len(batch))


def check_stop(server, batch, n):
    c = server.client()
    checked = 0
    for b in batch:
        text = b["text"]
        stop = text[len(text) // 2:len(text) // 2 + 2]
        if len(stop) < 2:
            continue
        want = text[:text.find(stop)]
        for stream in (False, True):
            r = c.completions.create(model=MODEL, prompt=b["prompt"],
                                     max_tokens=n, temperature=0,
                                     stop=[stop], stream=stream)
            if stream:
                chunks = list(r)
                got = "".join(ch.choices[0].text for ch in chunks)
                reason = chunks[-1].choices[0].finish_reason
            else:
                got, reason = r.choices[0].text, r.choices[0].finish_reason
            if got != want or reason != "stop":
                fail("stop %r (stream %s): %r %s, want %r" %
                     (stop, stream, got, reason, want))
        checked += 1
    print("stop strings: %d prompts end before their stop string, "
          "streamed or not" % checked)


def check_logprobs(server, batch, n):
    r = server.client().completions.create(
        model=MODEL, prompt=batch[0]["prompt"], max_tokens=n, temperature=0,
        logprobs=3)
    lp = r.choices[0].logprobs
    if len(lp.tokens) != r.usage.completion_tokens or \
            "".join(lp.tokens) != r.choices[0].text and \
            r.choices[0].finish_reason != "stop" or \
            any(v > 0 for v in lp.token_logprobs) or \
            any(len(t) > 3 or max(t.values()) < v - 1e-5
                for t, v in zip(lp.top_logprobs, lp.token_logprobs)):
        fail("logprobs %r" % lp)
    print("logprobs: %d tokens, each with its top 3" % len(lp.tokens))


def check_errors(server, batch, n):
    c = server.client()
    ok = dict(model=MODEL, prompt="Hello", max_tokens=2)
    for what, status, kw in [
            ("max_tokens 0", 400, dict(ok, max_tokens=0)),
            ("temperature of the wrong type", 400,
             dict(ok, extra_body={"temperature": "hot"})),
            ("an unknown field", 400, dict(ok, extra_body={"frobnicate": 1})),
            ("n 2", 400, dict(ok, n=2)),
            ("a prompt over the context", 400,
             dict(ok, prompt=[5] * 4090, max_tokens=100)),
            ("a token id past the vocabulary", 400,
             dict(ok, prompt=[1, 999999])),
            ("another model", 404, dict(ok, model="gpt-4"))]:
        expect_error(status, what, lambda: c.completions.create(**kw))
    for what, body, status in [
            ("malformed JSON", b"{\"prompt\": ", 400),
            ("a 17 MiB body", b"{\"prompt\": \"" + b"a" * (17 << 20) + b"\"}",
             413)]:
        got, text = raw(server.url + "/v1/completions", body,
                        {"Content-Type": "application/json"})
        if got != status:
            fail("%s: HTTP %d, expected %d" % (what, got, status))
        print("%s: %d %s" % (what, status,
                             json.loads(text)["error"]["message"][:60]))
    got, _ = raw(server.url + "/v1/nothing-here", b"{}")
    if got != 404:
        fail("unknown route: HTTP %d" % got)
    print("an unknown route: 404")
    check_greedy(server, batch[:1], n)


def check_chat(server, batch, n, render):
    """Chat completions equal completions of the text the chat template
    renders (its BOS, which the template writes, is the one a completion's
    prompt gets), streamed or not, with logprobs; the template's refusals
    and unsupported fields are 400s."""
    c = server.client()
    for b in batch:
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": b["prompt"]}]
        text = render(messages)
        if not text.startswith("<s>"):
            fail("the template's text does not start with its BOS: %r" % text)
        want = c.completions.create(model=MODEL, prompt=text[len("<s>"):],
                                    max_tokens=n, temperature=0)
        got = c.chat.completions.create(model=MODEL, messages=messages,
                                        max_tokens=n, temperature=0)
        msg = got.choices[0].message
        if msg.role != "assistant" or msg.content != want.choices[0].text or \
                got.choices[0].finish_reason != want.choices[0].finish_reason \
                or got.usage.prompt_tokens != want.usage.prompt_tokens:
            fail("chat %r: %r, the completion of its template's text: %r" %
                 (b["prompt"], got, want))
        chunks = list(c.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=n, temperature=0,
            stream=True))
        if chunks[0].choices[0].delta.role != "assistant" or \
                "".join(ch.choices[0].delta.content or "" for ch in chunks) \
                != msg.content or \
                chunks[-1].choices[0].finish_reason != \
                got.choices[0].finish_reason:
            fail("chat stream %r: %r" % (b["prompt"], chunks))
    lp = c.chat.completions.create(model=MODEL, messages=messages,
                                   max_tokens=n, temperature=0, logprobs=True,
                                   top_logprobs=2)
    content = lp.choices[0].logprobs.content
    if len(content) != lp.usage.completion_tokens or \
            any(len(t.top_logprobs) != 2 for t in content):
        fail("chat logprobs %r" % lp.choices[0].logprobs)
    print("chat: %d conversations equal the completions of their template's "
          "text, streamed or not; logprobs with the top 2" % len(batch))
    user = {"role": "user", "content": "Hi"}
    for what, kw in [
            ("roles the template refuses", dict(messages=[user, user])),
            ("no messages", dict(messages=[])),
            ("an image part", dict(messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "x"}}]}])),
            ("tool_choice required", dict(messages=[user],
                                          tool_choice="required")),
            ("a prompt field", dict(messages=[user],
                                    extra_body={"prompt": "x"}))]:
        expect_error(400, "chat: " + what,
                     lambda: c.chat.completions.create(model=MODEL,
                                                       max_tokens=2, **kw))


def check_nochat(server, batch, n, render):
    expect_error(400, "chat without a template",
                 lambda: server.client().chat.completions.create(
                     model=MODEL, max_tokens=2,
                     messages=[{"role": "user", "content": "Hi"}]))


def check_cancel(server, batch, n):
    c = server.client()
    stream = c.completions.create(model=MODEL, prompt=batch[0]["prompt"],
                                  max_tokens=3000, temperature=0,
                                  stream=True, extra_body={"ignore_eos": True})
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    deadline = time.time() + 60
    while server.metric("meshfold_requests_running") > 0:
        if time.time() > deadline:
            fail("a cancelled stream still runs after 60 s")
        time.sleep(0.05)
    tokens = server.metric("meshfold_generation_tokens_total")
    print("cancel: the stream's request left the batch (%s tokens generated "
          "so far, of 3000 asked)" % ("under 3000" if tokens < 3000 else
                                      "not under 3000"))
    # Not streamed: the client closes its connection while the request runs.
    body = json.dumps({"model": MODEL, "prompt": batch[0]["prompt"],
                       "max_tokens": 3000, "temperature": 0,
                       "ignore_eos": True}).encode()
    host, port = server.url[len("http://"):].split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d"
                 b"\r\n\r\n" % (host.encode(), len(body)) + body)
    deadline = time.time() + 60
    while server.metric("meshfold_requests_running") < 1:
        if time.time() > deadline:
            fail("a non-streamed request did not start in 60 s")
        time.sleep(0.05)
    sock.close()
    # Its handler counts its tokens as it gives up, before the batch drops it.
    while server.metric("meshfold_requests_running") > 0:
        if time.time() > deadline:
            fail("a closed non-streamed request still runs after 60 s")
        time.sleep(0.05)
    more = server.metric("meshfold_generation_tokens_total") - tokens
    print("cancel: the closed request left the batch (%s tokens generated, "
          "of 3000 asked)" % ("under 3000" if more < 3000 else
                              "not under 3000"))
    check_greedy(server, batch[:1], n)


def check_queue(exe, flags, batch, n):
    server = Server(exe, flags, ["--max-batch", "1", "--max-queue", "1"])
    c = server.client()
    codes = []

    def one():
        try:
            c.completions.create(model=MODEL, prompt="Hello", max_tokens=200,
                                 temperature=0, extra_body={"ignore_eos": True})
            codes.append(200)
        except openai.RateLimitError:
            codes.append(429)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if codes.count(429) < 1 or codes.count(200) < 2 or len(codes) != 6:
        fail("queue: %r" % codes)
    print("queue: 6 at once with room for 2: some served, the rest 429")
    server.stop()


def check_prefix(exe, flags, batch, n):
    """With the prefix cache (on by default when serving), requests sharing
    a 40-token prefix take its K/V (two whole blocks of 16) and answer as
    the server without it (--no-prefix-cache, and steps of any size) does."""
    base = [5 + (i * 37) % 500 for i in range(40)]
    prompts = [base + [7], base + [9, 11], base + [13, 17, 19]]
    texts = {}
    settings = {}
    for cache in (False, True):
        server = Server(exe, flags, [] if cache else
                        ["--no-prefix-cache", "--max-step-tokens", "0"])
        settings[cache] = re.search(r"; ([^;]*)\); SIGTERM", server.banner)
        c = server.client()
        texts[cache] = [c.completions.create(
            model=MODEL, prompt=p, max_tokens=8, temperature=0,
            extra_body={"ignore_eos": True}).choices[0].text for p in prompts]
        rows = server.metric("meshfold_prefix_cache_rows_total")
        server.stop()
    if texts[True] != texts[False]:
        fail("prefix cache: %r, without it %r" % (texts[True], texts[False]))
    print("prefix cache: %d prompt rows reused, the same completions as "
          "without it" % rows)
    print("settings: by default %s; with --no-prefix-cache and "
          "--max-step-tokens 0 %s" %
          (settings[True] and settings[True].group(1),
           settings[False] and settings[False].group(1)))


def check_key(exe, flags, batch, n):
    server = Server(exe, flags, ["--api-key", "sesame"])
    expect_error(401, "a wrong API key",
                 lambda: server.client("open").completions.create(
                     model=MODEL, prompt="Hi", max_tokens=1))
    server.client("sesame").completions.create(model=MODEL, prompt="Hi",
                                               max_tokens=1)
    print("the right API key: 200")
    server.stop()
    r = subprocess.run([exe] + flags + ["--serve", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=60)
    print("0.0.0.0 without a key: exit %d: %s" % (r.returncode,
                                                 r.stderr.strip()))


def check_drain(server, batch, n):
    c = server.client()
    got = {}

    def long():
        r = c.completions.create(model=MODEL, prompt="Hello", max_tokens=300,
                                 temperature=0, extra_body={"ignore_eos": True})
        got["r"] = r

    t = threading.Thread(target=long)
    t.start()
    deadline = time.time() + 60
    while server.metric("meshfold_requests_running") < 1:
        if time.time() > deadline:
            fail("the long request never ran")
        time.sleep(0.02)
    code, out, _ = server.stop()
    t.join(60)
    r = got.get("r")
    if r is None or r.usage.completion_tokens != 300:
        fail("drain: the running request was not finished: %r" % r)
    print("SIGTERM: the running request finished (300 tokens), exit %d, %s" %
          (code, out.strip().splitlines()[-1]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exe", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--chat-template", default="")
    p.add_argument("--only", default="greedy,stream,stop,logprobs,chat,"
                   "errors,cancel,queue,prefix,key,drain")
    p.add_argument("flags", nargs=argparse.REMAINDER)
    a = p.parse_args()
    flags = [f for f in a.flags if f != "--"]
    batch = [json.loads(line) for line in open(a.batch)]
    n = max(len(b["tokens"]) for b in batch)
    checks = a.only.split(",")
    extra = ["--chat-template", a.chat_template] if a.chat_template else []

    def render(messages):
        with open("chat-context.json", "w") as f:
            json.dump({"messages": messages, "add_generation_prompt": True}, f)
        return subprocess.run(["meshfold-chat-template", a.chat_template,
                               "--context", "chat-context.json"],
                              capture_output=True, text=True, check=True,
                              timeout=60).stdout

    server = Server(a.exe, flags, extra)
    for name in checks:
        if name in ("queue", "key", "prefix"):
            globals()["check_" + name](a.exe, flags, batch, n)
        elif name in ("chat", "nochat"):
            globals()["check_" + name](server, batch, n, render)
        elif name != "drain":
            globals()["check_" + name](server, batch, n)
    if "drain" in checks:
        check_drain(server, batch, n)
    else:
        server.stop()


main()
