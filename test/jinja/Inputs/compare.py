"""Renders every template (templates/NAME/tokenizer_config.json) with every
conversation (contexts/*.json) by meshfold-chat-template and by Python's
jinja2 (render-jinja2.py), and compares them byte for byte; where jinja2
refuses (raise_exception), meshfold must refuse with the same message, and
where the template fails in Python on a conversation it cannot take (a
TypeError), meshfold must fail too.

  compare.py TOOL INPUTS_DIR
Prints per template the conversations equal and those both refused.
"""
import os
import subprocess
import sys

tool, inputs = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
contexts = sorted(os.listdir(os.path.join(inputs, "contexts")))
failed = False
for name in sorted(os.listdir(os.path.join(inputs, "templates"))):
    config = os.path.join(inputs, "templates", name, "tokenizer_config.json")
    equal, refused = [], []
    for c in contexts:
        ctx = os.path.join(inputs, "contexts", c)
        ref = subprocess.run([sys.executable, os.path.join(here,
                                                           "render-jinja2.py"),
                              config, ctx], capture_output=True, timeout=60)
        got = subprocess.run([tool, os.path.dirname(config), "--context", ctx],
                             capture_output=True, timeout=60)
        label = c[:-len(".json")]
        if ref.returncode != 0:
            why = ref.stdout.decode().strip()
            why = why[len("error: "):] if ref.returncode == 1 else ""
            if ref.returncode not in (1, 2):
                print("FAIL %s/%s: jinja2: %s" % (name, label, ref.stderr))
                failed = True
                continue
            if got.returncode != 0 and why in got.stderr.decode():
                refused.append(label)
                continue
            print("FAIL %s/%s: jinja2 refuses (%s), meshfold: %r" %
                  (name, label, why, (got.stdout + got.stderr)[:300]))
            failed = True
        elif got.returncode != 0 or got.stdout != ref.stdout:
            print("FAIL %s/%s:\n--- jinja2\n%r\n--- meshfold\n%r" %
                  (name, label, ref.stdout, got.stdout + got.stderr))
            failed = True
        else:
            equal.append(label)
    print("%s: byte for byte: %s; both refuse: %s" %
          (name, " ".join(equal), " ".join(refused) or "-"))
sys.exit(1 if failed else 0)
