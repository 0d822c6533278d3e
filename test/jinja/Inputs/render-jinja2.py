"""Renders a chat template with Python's jinja2 as Hugging Face's
apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loop controls, raise_exception, tojson as json.dumps without
ASCII escapes), the reference meshfold's interpreter is compared with.

  render-jinja2.py TOKENIZER_CONFIG.json CONTEXT.json
Prints the text exactly, or 'error: MESSAGE' (raise_exception) and exits
1, or 'python: ERROR' (the template failed on the input) and exits 2.
"""
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None,
           sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


config = json.load(open(sys.argv[1], encoding="utf-8"))
context = json.load(open(sys.argv[2], encoding="utf-8"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
for name in ("bos_token", "eos_token"):
    token = config.get(name)
    if isinstance(token, dict):
        token = token.get("content")
    if token is not None:
        context.setdefault(name, token)
context.setdefault("tools", None)
try:
    text = env.from_string(config["chat_template"]).render(**context)
except jinja2.exceptions.TemplateError as e:
    print("error: %s" % e)
    sys.exit(1)
except (TypeError, AttributeError, KeyError, IndexError) as e:
    # The template cannot take this conversation (e.g. `in` on a null
    # content): Python's own error, which meshfold words its own way.
    print("python: %s: %s" % (type(e).__name__, e))
    sys.exit(2)
sys.stdout.buffer.write(text.encode("utf-8"))
