#!/usr/bin/env python3
"""Renders lmx's chat-template and Jinja feature cases with Python Jinja2, configured exactly as
transformers' chat_template_utils._compile_jinja_template does, and writes the goldens the C++ tests
compare against byte for byte.

    python3 tools/make_template_goldens.py          # rewrite tests/data/templates/*goldens.json
    python3 tools/make_template_goldens.py --check  # exit 1 if the committed goldens are stale

Inputs (tests/data/templates/):
  cases.json          templates (file, special tokens) and chat cases (messages, tools, flags)
  feature_cases.json  small templates exercising one interpreter feature each
Outputs:
  goldens.json          {template: {case: {"output": str} | {"error": str, "error_type": str}}}
  feature_goldens.json  {case: {"output": str} | {"error": str, "error_type": str}}
"""

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "templates"


def compile_jinja_template(chat_template):
    """transformers.utils.chat_template_utils._cached_compile_jinja_template, without the
    assistant-mask bookkeeping (its {% generation %} block renders its body unchanged)."""

    class AssistantTracker(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

        @jinja2.pass_eval_context
        def _generation_support(self, context, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers overrides Jinja's tojson (which HTML-escapes) with plain json.dumps.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(chat_template)


def run(render):
    try:
        return {"output": render()}
    except Exception as e:  # the C++ side must fail too; raise_exception messages must match
        return {"error": str(e), "error_type": type(e).__name__}


def render_chat(template, spec, case):
    """transformers' render_jinja_template: messages, tools, documents=None, add_generation_prompt,
    then the special tokens and template kwargs."""
    kwargs = {}
    for token in ("bos_token", "eos_token"):
        if spec.get(token) is not None:
            kwargs[token] = spec[token]
    if "enable_thinking" in case:
        kwargs["enable_thinking"] = case["enable_thinking"]
    kwargs.update(case.get("extra", {}))
    return template.render(
        messages=case["messages"],
        tools=case.get("tools"),
        documents=None,
        add_generation_prompt=case.get("add_generation_prompt", True),
        **kwargs,
    )


def chat_goldens():
    config = json.loads((DATA / "cases.json").read_text())
    goldens = {}
    for name, spec in config["templates"].items():
        template = compile_jinja_template((DATA / spec["file"]).read_text())
        goldens[name] = {}
        for case in config["cases"]:
            if "only" in case and name not in case["only"]:
                continue
            goldens[name][case["name"]] = run(lambda: render_chat(template, spec, case))
    return goldens


def feature_goldens():
    cases = json.loads((DATA / "feature_cases.json").read_text())
    goldens = {}
    for case in cases:
        if case["name"] in goldens:
            raise SystemExit(f"duplicate feature case name {case['name']!r}")

        def render(case=case):
            return compile_jinja_template(case["template"]).render(**case.get("vars", {}))

        goldens[case["name"]] = run(render)
    return goldens


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed goldens instead of writing")
    args = parser.parse_args()
    outputs = {"goldens.json": chat_goldens(), "feature_goldens.json": feature_goldens()}
    stale = False
    for file_name, data in outputs.items():
        text = json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
        path = DATA / file_name
        if args.check:
            if not path.exists() or path.read_text() != text:
                print(f"{path} is stale; run tools/make_template_goldens.py", file=sys.stderr)
                stale = True
        else:
            path.write_text(text)
            print(f"wrote {path} (jinja2 {jinja2.__version__})")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
