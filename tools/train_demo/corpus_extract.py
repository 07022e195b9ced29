#!/usr/bin/env python3
"""Turns the contents of Debian packages into the demo corpus: UTF-8 JSON Lines files, one record a line.

Called by scripts/fetch_demo_corpus.sh after it has downloaded and unpacked the packages; needs only the
Python standard library. Usage:

    python3 tools/train_demo/corpus_extract.py --root DIR_WITH_UNPACKED_PACKAGES --out OUT_DIR \
        [--kjv-text FILE] [--python-docs-max-mb 10]

`--root` holds one folder per package (`ROOT/<package>/usr/...`, as `dpkg-deb -x` leaves it).
`--kjv-text` is the output of `bible -f Gen1:1-Rev22:21` (one verse a line, `Ge1:1 In the ...`).

Files written (each line a JSON object; every record has "text"):

    kjv.jsonl               {"book", "chapter", "verse", "text"}                      King James Bible
    fortunes.jsonl          {"category", "package", "text"}                           fortune cookies, riddles, BOFH excuses
    devils-dictionary.jsonl {"headword", "text"}                                      Ambrose Bierce
    jargon.jsonl            {"headword", "text"}                                      The Jargon File 4.4.7
    wordnet.jsonl           {"lemmas", "pos", "text"}                                 WordNet 3.0 glosses (common senses)
    python-docs.jsonl       {"page", "title", "text"}                                 Python 3.11 documentation pages
    python-api.jsonl        {"name", "kind", "signature", "text"}                     first paragraph of each API entry

Everything is deterministic: inputs are read in sorted order and the output depends only on the packages.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import html.parser
import json
import os
import re
import sys
import textwrap
from pathlib import Path

# Fortune files taken from `fortunes` / `fortunes-min` (others are left out: song lyrics, comic-strip and
# TV quotes whose copyright is doubtful, and the files whose humour is about ethnicity, sex, drugs or politics).
FORTUNE_FILES = {
    "fortunes-min": ["fortunes", "literature", "riddles"],
    "fortunes": [
        "art", "computers", "cookie", "definitions", "education", "food", "goedel", "humorists", "kids", "law",
        "linux", "love", "magic", "medicine", "miscellaneous", "paradoxum", "people", "pets", "platitudes",
        "science", "sports", "tao", "wisdom", "work",
    ],
    "fortunes-bofh-excuses": ["bofh-excuses"],
}

# KJV book abbreviations as `bible` prints them, in canonical order, and their names.
KJV_BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth", "1 Samuel",
    "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther", "Job",
    "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon", "Isaiah", "Jeremiah", "Lamentations", "Ezekiel",
    "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai",
    "Zechariah", "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
    "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James", "1 Peter", "2 Peter",
    "1 John", "2 John", "3 John", "Jude", "Revelation",
]

PYTHON_DOC_SECTIONS = ["tutorial", "library", "reference", "howto", "faq"]
PYTHON_DOC_PAGES = ["glossary.html"]
WORDNET_POS = {"noun": "noun", "verb": "verb", "adj": "adjective", "adv": "adverb"}


class ExtractError(RuntimeError):
    pass


def fail(msg: str) -> None:
    raise ExtractError(msg)


def log(msg: str) -> None:
    print(f"[corpus] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------
# Text clean-up shared by the sources
# ------------------------------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_lines(text: str) -> str:
    """Tabs expanded, trailing blanks and control characters removed, common indentation removed,
    runs of blank lines collapsed to one, no blank lines at either end."""
    lines = [_CONTROL.sub("", line.expandtabs(8)).rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    text = textwrap.dedent("\n".join(lines))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def unwrap_paragraphs(text: str) -> str:
    """Joins hard-wrapped lines of prose paragraphs; keeps indented blocks (verse, code, tables) as lines."""
    out = []
    for block in clean_lines(text).split("\n\n"):
        lines = block.split("\n")
        if all(line.startswith("    ") or not line.strip() for line in lines[1:]) and len(lines) > 1 and \
                lines[0].startswith("    "):
            out.append(textwrap.dedent(block))
        elif any(line.startswith("    ") for line in lines) and not all(line.startswith("    ") for line in lines):
            # mixed: a prose line followed by an indented quotation; keep the shape
            out.append(block)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(b for b in out if b.strip())


def write_jsonl(path: Path, records: list[dict]) -> int:
    if not records:
        fail(f"{path.name}: no records extracted")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in records:
            if not isinstance(r.get("text"), str) or not r["text"].strip():
                fail(f"{path.name}: record without text: {r!r:.200}")
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    size = path.stat().st_size
    log(f"{path.name}: {len(records)} records, {size / 1e6:.2f} MB")
    return size


def read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


# ------------------------------------------------------------------------------------------------
# King James Bible (output of the `bible` program of bible-kjv)
# ------------------------------------------------------------------------------------------------

_VERSE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def extract_kjv(kjv_text: Path) -> list[dict]:
    records, abbrevs = [], []
    for n, line in enumerate(read_text(kjv_text).splitlines(), 1):
        if not line.strip():
            continue
        m = _VERSE.match(line)
        if not m:
            fail(f"{kjv_text}:{n}: not a verse line: {line[:80]!r}")
        abbrev, chapter, verse, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()
        if not abbrevs or abbrevs[-1] != abbrev:
            if abbrev in abbrevs:
                fail(f"{kjv_text}:{n}: book {abbrev!r} appears twice; the text is not in canonical order")
            abbrevs.append(abbrev)
        if len(abbrevs) > len(KJV_BOOKS):
            fail(f"{kjv_text}: more than {len(KJV_BOOKS)} books")
        records.append({"book": KJV_BOOKS[len(abbrevs) - 1], "chapter": chapter, "verse": verse,
                        "text": re.sub(r"\s+", " ", text)})
    if len(abbrevs) != len(KJV_BOOKS):
        fail(f"{kjv_text}: found {len(abbrevs)} books, expected {len(KJV_BOOKS)}")
    if not (31000 <= len(records) <= 31200):
        fail(f"{kjv_text}: {len(records)} verses; the KJV has 31102")
    first, last = records[0], records[-1]
    if not first["text"].startswith("In the beginning God created") or last["book"] != "Revelation":
        fail(f"{kjv_text}: unexpected first/last verse {first} / {last}")
    return records


# ------------------------------------------------------------------------------------------------
# Fortune files
# ------------------------------------------------------------------------------------------------


def extract_fortunes(root: Path) -> list[dict]:
    records = []
    for package, names in FORTUNE_FILES.items():
        base = root / package / "usr/share/games/fortunes"
        for name in names:
            path = base / name
            if not path.is_file():
                fail(f"fortune file {path} is missing (package {package} not unpacked?)")
            for chunk in re.split(r"(?m)^%\s*$", read_text(path)):
                text = clean_lines(chunk)
                if name == "bofh-excuses":
                    text = re.sub(r"^BOFH excuse #\d+:\s*", "", text).strip()
                if len(text) < 8 or len(text) > 2000:
                    continue
                records.append({"category": name, "package": package, "text": text})
    return records


# ------------------------------------------------------------------------------------------------
# dictd databases (.index + .dict.dz)
# ------------------------------------------------------------------------------------------------

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64_number(s: str) -> int:
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


def read_dictd(index: Path, dict_dz: Path) -> list[tuple[str, str]]:
    data = gzip.decompress(dict_dz.read_bytes())
    seen, entries = set(), []
    for line in read_text(index).splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00database") or parts[0].startswith("00-database"):
            continue
        offset, length = _b64_number(parts[1]), _b64_number(parts[2])
        if (offset, length) in seen:
            continue  # several headwords may point to the same entry
        seen.add((offset, length))
        entries.append((offset, parts[0], data[offset:offset + length].decode("utf-8", errors="replace")))
    entries.sort()
    return [(head, body) for _, head, body in entries]


def extract_devil(root: Path) -> list[dict]:
    base = root / "dict-devil/usr/share/dictd"
    records = []
    for head, body in read_dictd(base / "devil.index", base / "devil.dict.dz"):
        text = unwrap_paragraphs(body)
        first = text.split("\n", 1)[0]
        if not re.match(r"^[A-Z][A-Z' .-]*[A-Z.]", first):
            continue  # preface and other non-entries
        records.append({"headword": head, "text": text})
    return records


def extract_jargon(root: Path) -> list[dict]:
    base = root / "dict-jargon/usr/share/dictd"
    records = []
    for head, body in read_dictd(base / "jargon.index", base / "jargon.dict.dz"):
        lines = body.replace("\r\n", "\n").split("\n")
        if not lines or not lines[0].strip():
            continue
        headword = lines[0].strip()
        rest = "\n".join(lines[1:])
        # cross references "{foo}" and "{\n    foo}" become plain words
        rest = re.sub(r"\{\s*([^{}]*?)\s*\}", lambda m: re.sub(r"\s+", " ", m.group(1)), rest)
        rest = unwrap_paragraphs(rest)
        if len(rest) < 20:
            continue
        records.append({"headword": headword, "text": f"{headword}\n{rest}"})
    return records


# ------------------------------------------------------------------------------------------------
# WordNet 3.0 glosses
# ------------------------------------------------------------------------------------------------


def wordnet_tagged_synsets(base: Path) -> set[tuple[str, int]]:
    """(pos, offset) of every synset that has a sense tagged in WordNet's semantic concordance: the
    index lists a lemma's synsets most frequent first and says how many of them are tagged."""
    tagged = set()
    for suffix, pos in WORDNET_POS.items():
        path = base / f"index.{suffix}"
        if not path.is_file():
            fail(f"{path} is missing")
        for line in read_text(path).splitlines():
            if line.startswith("  "):
                continue
            f = line.split()
            synset_cnt, p_cnt = int(f[2]), int(f[3])
            tagsense_cnt = int(f[5 + p_cnt])
            for offset in f[6 + p_cnt:6 + p_cnt + synset_cnt][:tagsense_cnt]:
                tagged.add((pos, int(offset)))
    return tagged


def extract_wordnet(root: Path) -> list[dict]:
    """Glosses of the synsets with a tagged sense (the common senses of common words, ~27k of 117k)."""
    base = root / "wordnet-base/usr/share/wordnet"
    tagged = wordnet_tagged_synsets(base)
    records = []
    for suffix, pos in WORDNET_POS.items():
        path = base / f"data.{suffix}"
        if not path.is_file():
            fail(f"{path} is missing")
        for line in read_text(path).splitlines():
            if line.startswith("  ") or " | " not in line:
                continue  # licence header
            head, gloss = line.split(" | ", 1)
            fields = head.split()
            if (pos, int(fields[0])) not in tagged:
                continue
            count = int(fields[3], 16)
            lemmas = []
            for i in range(count):
                lemma = re.sub(r"\([a-z]+\)$", "", fields[4 + 2 * i]).replace("_", " ")
                if lemma not in lemmas:
                    lemmas.append(lemma)
            parts = [p.strip() for p in gloss.strip().split(";")]
            definition = "; ".join(p for p in parts if p and not p.startswith('"'))
            examples = [p.strip('"').strip() for p in parts if p.startswith('"')]
            if not definition:
                continue
            text = f"{', '.join(lemmas)} ({pos}): {definition}"
            if examples:
                text += "; " + "; ".join(f'"{e}"' for e in examples)
            records.append({"lemmas": lemmas, "pos": pos, "text": text})
    return records


# ------------------------------------------------------------------------------------------------
# Python documentation (Sphinx HTML -> text)
# ------------------------------------------------------------------------------------------------

_BLOCK_TAGS = {"p", "div", "section", "pre", "li", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5",
               "h6", "table", "tr", "blockquote", "figure", "caption", "hr", "br"}
_SKIP_CLASSES = {"headerlink", "sphinxsidebar", "related", "footer", "admonition-title", "versionadded",
                 "versionchanged"}


class SphinxText(html.parser.HTMLParser):
    """Text of `<div class="body">`: paragraphs as lines, `<pre>` verbatim, list items with "- ",
    headings underlined; API entries (`<dl class="py ...">`) collected with their first paragraph."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth_body = 0          # >0 while inside div.body
        self.stack: list[tuple[str, bool]] = []   # (tag, skip)
        self.skip = 0
        self.pre = 0
        self.blocks: list[str] = []
        self.cur: list[str] = []
        self.title = ""
        self.in_title = False
        # API entries
        self.api: list[dict] = []
        self.dl_kinds: list[str | None] = []
        self.dt_id: str | None = None
        self.dt_text: list[str] | None = None
        self.pending: list[dict] = []   # entries waiting for their first <p>
        self.p_text: list[str] | None = None

    # -- helpers
    def flush(self, prefix: str = "") -> None:
        if self.pre:
            return
        text = re.sub(r"\s+", " ", "".join(self.cur)).strip()
        if text == "-":
            return  # a list item's marker waits for the item's first paragraph
        self.cur = []
        if text:
            self.blocks.append(prefix + text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag == "title":
            self.in_title = True
        if self.depth_body == 0:
            if tag == "div" and "body" in classes:
                self.depth_body = 1
                self.stack = [("div", False)]
            return
        if tag in ("br", "hr", "img", "meta", "link", "input", "wbr"):
            if tag == "br" and not self.skip:
                self.cur.append("\n" if self.pre else " ")
            return
        skip = bool(classes & _SKIP_CLASSES) or tag in ("script", "style")
        self.stack.append((tag, skip))
        if skip:
            self.skip += 1
            return
        if self.skip:
            return
        if tag == "pre":
            self.flush()
            self.pre += 1
        elif tag in _BLOCK_TAGS:
            self.flush()
        if tag == "li":
            self.cur.append("- ")
        if tag == "dl":
            kind = next((c for c in classes if c != "py"), None) if "py" in classes else None
            self.dl_kinds.append(kind)
        if tag == "dt" and self.dl_kinds and self.dl_kinds[-1] and a.get("id"):
            self.dt_id = a["id"]
            self.dt_text = []
        if tag == "p" and self.pending:
            self.p_text = []

    def handle_endtag(self, tag):
        if tag == "title":
            self.in_title = False
        if self.depth_body == 0:
            return
        if tag in ("br", "hr", "img", "meta", "link", "input", "wbr"):
            return
        # pop to the matching tag (tolerates unclosed <p>, <li> ...)
        while self.stack:
            t, skip = self.stack.pop()
            if skip:
                self.skip -= 1
            if t == tag:
                break
        if not self.stack:
            self.flush()
            self.depth_body = 0
            return
        if self.skip:
            return
        if tag == "pre":
            self.pre -= 1
            text = "".join(self.cur).strip("\n")
            self.cur = []
            if text.strip():
                self.blocks.append("\n".join("    " + line if line else "" for line in text.split("\n")))
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            text = re.sub(r"\s+", " ", "".join(self.cur)).strip()
            self.cur = []
            if text:
                self.blocks.append(text + "\n" + ("=" if tag in ("h1", "h2") else "-") * min(len(text), 60))
        elif tag in _BLOCK_TAGS:
            self.flush()
        if tag == "dl" and self.dl_kinds:
            self.dl_kinds.pop()
        if tag == "dt" and self.dt_text is not None:
            sig = re.sub(r"\s+", " ", "".join(self.dt_text)).strip()
            self.pending.append({"name": self.dt_id, "kind": self.dl_kinds[-1] if self.dl_kinds else None,
                                 "signature": sig})
            self.dt_id, self.dt_text = None, None
        if tag == "p" and self.p_text is not None:
            para = re.sub(r"\s+", " ", "".join(self.p_text)).strip()
            for entry in self.pending:
                entry["summary"] = para
                self.api.append(entry)
            self.pending, self.p_text = [], None

    def handle_data(self, data):
        if self.in_title:
            self.title += data
        if self.depth_body == 0 or self.skip:
            return
        self.cur.append(data)
        if self.dt_text is not None:
            self.dt_text.append(data)
        if self.p_text is not None:
            self.p_text.append(data)


def extract_python_docs(root: Path, max_bytes: int) -> tuple[list[dict], list[dict]]:
    base = root / "python3.11-doc/usr/share/doc/python3.11/html"
    if not base.is_dir():
        fail(f"{base} is missing")
    paths = []
    for section in PYTHON_DOC_SECTIONS:
        paths += sorted((base / section).rglob("*.html"))
    paths += [base / p for p in PYTHON_DOC_PAGES]
    pages, api, total = [], [], 0
    for path in paths:
        parser = SphinxText()
        parser.feed(read_text(path))
        parser.close()
        text = re.sub(r"\n{3,}", "\n\n", "\n\n".join(parser.blocks)).strip()
        text = text.replace("\u00b6", "")
        if len(text) < 200:
            continue
        rel = str(path.relative_to(base).with_suffix(""))
        title = re.sub(r"\s+", " ", parser.title).replace(" — Python 3.11.2 documentation", "").strip()
        size = len(text.encode("utf-8"))
        if total + size > max_bytes:
            log(f"python-docs: size cap reached at {rel}; later pages left out")
            break
        total += size
        pages.append({"page": rel, "title": title, "text": text})
        for entry in parser.api:
            summary = entry.get("summary", "")
            sig = entry["signature"].replace("\u00b6", "").strip()
            if not summary or len(summary) < 10 or not entry["name"]:
                continue
            api.append({"name": entry["name"], "kind": entry["kind"], "signature": sig, "text": summary})
    return pages, api


# ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, type=Path, help="folder with one unpacked package per subfolder")
    ap.add_argument("--out", required=True, type=Path, help="output folder (created)")
    ap.add_argument("--kjv-text", type=Path, help="output of `bible -f Gen1:1-Rev22:21`")
    ap.add_argument("--python-docs-max-mb", type=float, default=10.0,
                    help="cap on the text taken from the Python documentation (default 10 MB)")
    args = ap.parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        sizes = {}
        if args.kjv_text:
            sizes["kjv.jsonl"] = write_jsonl(args.out / "kjv.jsonl", extract_kjv(args.kjv_text))
        sizes["fortunes.jsonl"] = write_jsonl(args.out / "fortunes.jsonl", extract_fortunes(args.root))
        sizes["devils-dictionary.jsonl"] = write_jsonl(args.out / "devils-dictionary.jsonl",
                                                       extract_devil(args.root))
        sizes["jargon.jsonl"] = write_jsonl(args.out / "jargon.jsonl", extract_jargon(args.root))
        sizes["wordnet.jsonl"] = write_jsonl(args.out / "wordnet.jsonl", extract_wordnet(args.root))
        pages, api = extract_python_docs(args.root, int(args.python_docs_max_mb * 1e6))
        sizes["python-docs.jsonl"] = write_jsonl(args.out / "python-docs.jsonl", pages)
        sizes["python-api.jsonl"] = write_jsonl(args.out / "python-api.jsonl", api)
        log(f"total {sum(sizes.values()) / 1e6:.2f} MB")
    except (ExtractError, OSError, ValueError) as e:
        print(f"[corpus] ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
