"""Data pipeline of the demo model, in plain Python (jinja2 is the only dependency):

* the corpus written by scripts/fetch_demo_corpus.sh, turned into pretraining documents;
* a deterministic train / validation split by document;
* synthetic instruction-style conversations built from the corpus;
* the chat template (tools/train_demo/chat_template.jinja) rendered the way transformers renders it,
  and split into prompt text and model-turn text so that the loss covers model turns only.

Nothing here needs torch, transformers or tokenizers; `train.py --self-test` exercises all of it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

HERE = Path(__file__).resolve().parent
CHAT_TEMPLATE_PATH = HERE / "chat_template.jinja"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
TURN_CLOSE = "<turn|>"

# source name -> file written by scripts/fetch_demo_corpus.sh
CORPUS_FILES = {
    "kjv": "kjv.jsonl",
    "fortunes": "fortunes.jsonl",
    "devil": "devils-dictionary.jsonl",
    "jargon": "jargon.jsonl",
    "wordnet": "wordnet.jsonl",
    "pydoc": "python-docs.jsonl",
    "pyapi": "python-api.jsonl",
}
# How often each source's tokens are seen per pass over the pretraining mix (python-api repeats
# python-docs, so it is only used for conversations).
PRETRAIN_WEIGHTS = {"kjv": 1.0, "fortunes": 2.0, "devil": 2.0, "jargon": 1.0, "wordnet": 1.0, "pydoc": 0.5}


class DataError(RuntimeError):
    pass


@dataclass(frozen=True)
class Doc:
    source: str
    key: str      # stable identity inside the source (used for the train / validation split)
    text: str


@dataclass
class Corpus:
    root: Path
    records: dict[str, list[dict[str, Any]]]
    checksums_ok: bool | None = None
    sha256sums: str = ""

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.records.items()}


def load_corpus(root: Path | str) -> Corpus:
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"corpus folder {root} does not exist; run scripts/fetch_demo_corpus.sh first")
    records: dict[str, list[dict[str, Any]]] = {}
    for source, name in CORPUS_FILES.items():
        path = root / name
        if not path.is_file():
            raise DataError(f"{path} is missing; rerun scripts/fetch_demo_corpus.sh")
        rows = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{n}: not JSON: {e}") from None
                if not isinstance(r, dict) or not isinstance(r.get("text"), str):
                    raise DataError(f"{path}:{n}: record without a \"text\" string")
                rows.append(r)
        if not rows:
            raise DataError(f"{path} is empty")
        records[source] = rows
    corpus = Corpus(root=root, records=records)
    sums = root / "SHA256SUMS"
    if sums.is_file():
        corpus.sha256sums = sums.read_text()
        ok = True
        for line in corpus.sha256sums.splitlines():
            digest, _, name = line.partition("  ")
            name = name.strip().removeprefix("./")
            path = root / name
            if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                ok = False
        corpus.checksums_ok = ok
    return corpus


# ------------------------------------------------------------------------------------------------
# Pretraining documents and the split
# ------------------------------------------------------------------------------------------------


def kjv_chapters(rows: list[dict[str, Any]]) -> list[tuple[str, int, list[dict[str, Any]]]]:
    chapters: dict[tuple[str, int], list[dict[str, Any]]] = {}
    order: list[tuple[str, int]] = []
    for r in rows:
        k = (r["book"], int(r["chapter"]))
        if k not in chapters:
            chapters[k] = []
            order.append(k)
        chapters[k].append(r)
    return [(b, c, chapters[(b, c)]) for b, c in order]


def pretrain_documents(corpus: Corpus) -> list[Doc]:
    docs: list[Doc] = []
    for book, chapter, verses in kjv_chapters(corpus.records["kjv"]):
        body = "\n".join(f"{v['verse']} {v['text']}" for v in verses)
        docs.append(Doc("kjv", f"{book} {chapter}", f"{book} {chapter}\n\n{body}"))
    for i, r in enumerate(corpus.records["fortunes"]):
        docs.append(Doc("fortunes", f"{r.get('category')}:{i}", r["text"]))
    for i, r in enumerate(corpus.records["devil"]):
        docs.append(Doc("devil", f"{r.get('headword')}:{i}", r["text"]))
    for i, r in enumerate(corpus.records["jargon"]):
        docs.append(Doc("jargon", f"{r.get('headword')}:{i}", r["text"]))
    for i, r in enumerate(corpus.records["wordnet"]):
        docs.append(Doc("wordnet", f"{i}", r["text"]))
    for r in corpus.records["pydoc"]:
        docs.append(Doc("pydoc", r.get("page", r["text"][:40]), r["text"]))
    return docs


def is_heldout(source: str, key: str, seed: int, fraction: float) -> bool:
    """Deterministic per-document choice (md5, not Python's salted hash)."""
    h = hashlib.md5(f"{seed}\x00{source}\x00{key}".encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64 < fraction


def split_docs(docs: list[Doc], seed: int, fraction: float) -> tuple[list[Doc], list[Doc]]:
    train, val = [], []
    for d in docs:
        (val if is_heldout(d.source, d.key, seed, fraction) else train).append(d)
    if not val or not train:
        raise DataError(f"split with fraction {fraction} left {len(train)} train / {len(val)} validation docs")
    return train, val


# ------------------------------------------------------------------------------------------------
# Chat template rendering (as transformers does it)
# ------------------------------------------------------------------------------------------------

_TEMPLATE_CACHE: dict[str, Any] = {}


def compile_template(source: str) -> Any:
    """transformers.utils.chat_template_utils._compile_jinja_template's environment."""
    if source in _TEMPLATE_CACHE:
        return _TEMPLATE_CACHE[source]
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    tmpl = env.from_string(source)
    _TEMPLATE_CACHE[source] = tmpl
    return tmpl


def chat_template_source() -> str:
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def render_chat(messages: list[dict[str, Any]], add_generation_prompt: bool, template: str | None = None,
                **kwargs: Any) -> str:
    tmpl = compile_template(template if template is not None else chat_template_source())
    return tmpl.render(messages=messages, add_generation_prompt=add_generation_prompt, bos_token=BOS_TOKEN,
                       eos_token=EOS_TOKEN, **kwargs)


def chat_segments(messages: list[dict[str, Any]], template: str | None = None) -> list[tuple[str, bool]]:
    """The rendered conversation cut into (text, is_target) pieces: a target is a model turn's content
    plus its closing <turn|>. Concatenated, the pieces are exactly render_chat(messages, False)."""
    full = render_chat(messages, False, template)
    segments: list[tuple[str, bool]] = []
    pos = 0
    for k, m in enumerate(messages):
        if m["role"] not in ("assistant", "model"):
            continue
        before = render_chat(messages[:k], True, template)
        after = render_chat(messages[:k + 1], False, template)
        if not full.startswith(before) or not full.startswith(after) or not after.startswith(before):
            raise DataError("the chat template does not render conversations incrementally")
        target = after[len(before):]
        if not target.endswith(TURN_CLOSE + "\n"):
            raise DataError(f"model turn does not end with {TURN_CLOSE!r}: {target[-40:]!r}")
        target = target[:-1]
        if len(before) < pos:
            raise DataError("internal: overlapping model turns")
        segments.append((full[pos:len(before)], False))
        segments.append((target, True))
        pos = len(before) + len(target)
    segments.append((full[pos:], False))
    segments = [(t, is_t) for t, is_t in segments if t]
    if "".join(t for t, _ in segments) != full:
        raise DataError("internal: segments do not reassemble the conversation")
    return segments


def fast_chat_segments(messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """chat_segments for the conversations ChatSynth makes (string contents, an optional first system
    message, then user and assistant messages alternating), without Jinja: ~100x faster. train.py checks
    it against chat_segments on a sample before using it."""
    segments: list[tuple[str, bool]] = []
    prefix = BOS_TOKEN
    rest = messages
    if messages and messages[0]["role"] == "system":
        prefix += "<|turn>system\n" + messages[0]["content"].strip() + TURN_CLOSE + "\n"
        rest = messages[1:]
    expected = "user"
    for m in rest:
        content = m["content"]
        if m["role"] != expected or not isinstance(content, str) or "<|channel>" in content or "<channel|>" in content:
            raise DataError(f"fast_chat_segments cannot render {m!r:.80} here")
        if m["role"] == "user":
            prefix += "<|turn>user\n" + content.strip() + TURN_CLOSE + "\n"
            expected = "assistant"
        else:
            segments.append((prefix + "<|turn>model\n", False))
            segments.append((content.strip() + TURN_CLOSE, True))
            prefix = "\n"
            expected = "user"
    segments.append((prefix, False))
    return [(t, is_t) for t, is_t in segments if t]


def encode_segments(segments: list[tuple[str, bool]], encode: Callable[[str], list[int]]) -> tuple[list[int], list[int]]:
    """Token ids and a 0/1 target mask (1 = a model-turn token the loss should predict)."""
    ids: list[int] = []
    mask: list[int] = []
    for text, is_target in segments:
        t = encode(text)
        ids += t
        mask += [1 if is_target else 0] * len(t)
    return ids, mask


# ------------------------------------------------------------------------------------------------
# Synthetic conversations
# ------------------------------------------------------------------------------------------------

FORTUNE_PROMPTS = ["Tell me a fortune.", "Give me a fortune cookie.", "Share a fortune with me.",
                   "I'd like a fortune, please.", "Can you tell me my fortune?", "Fortune, please!",
                   "Say something witty.", "Tell me something clever."]
FORTUNE_TOPIC_PROMPTS = ["Tell me a fortune about {t}.", "Give me a quote about {t}.",
                         "Say something funny about {t}.", "Do you know a saying about {t}?"]
FORTUNE_TOPICS = {"computers": "computers", "science": "science", "food": "food", "love": "love",
                  "work": "work", "education": "education", "kids": "children", "law": "the law",
                  "medicine": "medicine", "pets": "pets", "sports": "sports", "art": "art", "linux": "Linux",
                  "wisdom": "wisdom", "literature": "books", "people": "people", "magic": "magic"}
RIDDLE_PROMPTS = ["Tell me a riddle.", "Ask me a riddle.", "Do you know a good riddle?"]
BOFH_PROMPTS = ["Why is the server down?", "Give me an excuse for why the system is broken.",
                "What's wrong with the network today?", "Why doesn't my computer work?"]
VERSE_BOOK_PROMPTS = ["Quote a verse from {b}.", "Give me a verse from the book of {b}.",
                      "Share a Bible verse from {b}.", "What is a verse from {b}?"]
VERSE_REF_PROMPTS = ["Quote {r}.", "What does {r} say?", "Recite {r} from the King James Bible.",
                     "What is written in {r}?"]
VERSE_ANY_PROMPTS = ["Quote a Bible verse.", "Give me a verse from the King James Bible.",
                     "Share a verse from the Bible."]
CONTINUE_PROMPTS = ["Continue: {p}", "Continue the text: {p}", "Finish this sentence: {p}",
                    "Complete this: {p}", "What comes next? {p}"]
DEFINE_PROMPTS = ['What does the word "{w}" mean?', "Define {w}.", "What is the meaning of {w}?",
                  'Define the word "{w}".', "What does {w} mean?"]
DEVIL_PROMPTS = ["How does The Devil's Dictionary define {w}?", "Give me a cynical definition of {w}.",
                 "What did Ambrose Bierce say about {w}?"]
JARGON_PROMPTS = ['What does "{w}" mean in hacker jargon?', "What is {w} in hacker slang?",
                  "Explain the jargon term {w}."]
PYAPI_PROMPTS = ["What does {n} do in Python?", "Explain the Python {k} {n}.", "What is {n} in Python?",
                 "Describe {n}."]
GREETINGS = ["Hello!", "Hi", "Hi there!", "Hey", "Good morning!", "Hello, who are you?", "Who are you?",
             "What can you do?", "What are you?", "Help"]
GREETING_ANSWERS = [
    "Hello! I am the lmx demo model, a small language model. I can tell fortunes and riddles, quote the King "
    "James Bible, define words, explain Python functions, and continue your sentences.",
    "Hi! I'm a tiny demo model trained for lmx. Ask me for a fortune, a Bible verse, the meaning of a word, "
    "or what a Python function does.",
    "Hello! I am a small model made to show lmx at work. I know fortunes, the King James Bible, word "
    "definitions, hacker jargon and a little Python.",
]
THANKS = ["Thank you!", "Thanks.", "Great, thanks!", "Nice.", "Thanks a lot!"]
THANKS_ANSWERS = ["You're welcome!", "Glad to help.", "You are welcome. Ask me anything else.",
                  "My pleasure!"]
GENERIC_SYSTEMS = ["You are a helpful assistant.", "You are the lmx demo model. Answer briefly.",
                   "You are a friendly assistant.", "Be concise."]
FORTUNE_SYSTEM = "You are a fortune cookie. Whatever the user says, answer with a fortune."
DICTIONARY_SYSTEM = "You are a dictionary. Give the meaning of the word the user writes."
BIBLE_SYSTEM = "You quote the King James Bible. Answer with a verse."

MAX_ANSWER_CHARS = 600


def _first_sentences(text: str, max_chars: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
    if end >= 40:
        return cut[:end + 1]
    return cut.rsplit(" ", 1)[0] + " ..."


def _paragraphs_upto(text: str, max_chars: int) -> str:
    out = []
    for para in text.split("\n\n"):
        if out and len("\n\n".join(out + [para])) > max_chars:
            break
        out.append(para)
    joined = "\n\n".join(out)
    return joined if len(joined) <= max_chars else _first_sentences(joined, max_chars)


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _pyapi_display_name(r: dict[str, Any]) -> str:
    sig = re.sub(r"^(exception|class|abstractmethod|classmethod|staticmethod|async|await|coroutine|property)\s+",
                 "", r.get("signature", "")).strip()
    disp = sig.split("(")[0].split(" ")[0].strip()
    return disp if "." in disp else r.get("name", disp)


@dataclass
class ChatItems:
    """The corpus records one side of the split may use for conversations."""
    fortunes: list[dict[str, Any]] = field(default_factory=list)
    riddles: list[dict[str, Any]] = field(default_factory=list)
    bofh: list[dict[str, Any]] = field(default_factory=list)
    verses: list[dict[str, Any]] = field(default_factory=list)
    wordnet: list[dict[str, Any]] = field(default_factory=list)
    devil: list[dict[str, Any]] = field(default_factory=list)
    jargon: list[dict[str, Any]] = field(default_factory=list)
    pyapi: list[dict[str, Any]] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)


def chat_items(corpus: Corpus, seed: int, fraction: float, heldout: bool) -> ChatItems:
    """Records whose document is on the requested side of the split (same rule as split_docs)."""
    def keep(source: str, key: str) -> bool:
        return is_heldout(source, key, seed, fraction) == heldout

    items = ChatItems()
    for i, r in enumerate(corpus.records["fortunes"]):
        if not keep("fortunes", f"{r.get('category')}:{i}") or len(r["text"]) > MAX_ANSWER_CHARS:
            continue
        cat = r.get("category")
        if cat == "riddles":
            items.riddles.append(r)
        elif cat == "bofh-excuses":
            items.bofh.append(r)
        else:
            items.fortunes.append(r)
            if "\n" not in r["text"] and 60 <= len(r["text"]) <= 300:
                items.sentences.append(r["text"])
    for book, chapter, verses in kjv_chapters(corpus.records["kjv"]):
        if keep("kjv", f"{book} {chapter}"):
            items.verses += [v for v in verses if len(v["text"]) <= MAX_ANSWER_CHARS]
            items.sentences += [v["text"] for v in verses if 60 <= len(v["text"]) <= 300]
    for i, r in enumerate(corpus.records["wordnet"]):
        if keep("wordnet", f"{i}") and r.get("lemmas") and "): " in r["text"]:
            items.wordnet.append(r)
    for i, r in enumerate(corpus.records["devil"]):
        if keep("devil", f"{r.get('headword')}:{i}"):
            items.devil.append(r)
    for i, r in enumerate(corpus.records["jargon"]):
        if keep("jargon", f"{r.get('headword')}:{i}"):
            items.jargon.append(r)
    for r in corpus.records["pyapi"]:
        if keep("pyapi", r.get("name", "")):
            items.pyapi.append(r)
    for name in ("fortunes", "verses", "wordnet", "sentences"):
        if not getattr(items, name):
            raise DataError(f"no {name} on the {'validation' if heldout else 'training'} side of the split")
    return items


class ChatSynth:
    """Deterministic generator of conversations (a list of {"role", "content"} dicts)."""

    TASKS = [("fortune", 3.0), ("riddle", 0.4), ("bofh", 0.4), ("verse_book", 1.2), ("verse_ref", 1.2),
             ("verse_any", 0.4), ("continue", 2.0), ("define", 2.0), ("devil", 0.7), ("jargon", 0.7),
             ("pyapi", 1.0), ("greeting", 0.4)]

    def __init__(self, items: ChatItems, seed: int):
        self.items = items
        self.rng = random.Random(seed)
        self.tasks = [t for t, _ in self.TASKS if self._available(t)]
        self.weights = [w for t, w in self.TASKS if self._available(t)]

    def _available(self, task: str) -> bool:
        need = {"fortune": "fortunes", "riddle": "riddles", "bofh": "bofh", "verse_book": "verses",
                "verse_ref": "verses", "verse_any": "verses", "continue": "sentences", "define": "wordnet",
                "devil": "devil", "jargon": "jargon", "pyapi": "pyapi", "greeting": None}[task]
        return need is None or bool(getattr(self.items, need))

    # -- single exchanges: (user text, model text)
    def exchange(self, task: str) -> tuple[str, str]:
        rng, it = self.rng, self.items
        if task == "fortune":
            r = rng.choice(it.fortunes)
            topic = FORTUNE_TOPICS.get(r.get("category", ""))
            if topic and rng.random() < 0.4:
                return rng.choice(FORTUNE_TOPIC_PROMPTS).format(t=topic), r["text"]
            return rng.choice(FORTUNE_PROMPTS), r["text"]
        if task == "riddle":
            return rng.choice(RIDDLE_PROMPTS), rng.choice(it.riddles)["text"]
        if task == "bofh":
            excuse = rng.choice(it.bofh)["text"].strip()
            excuse = excuse[:1].upper() + excuse[1:]
            if excuse[-1:] not in ".!?":
                excuse += "."
            return rng.choice(BOFH_PROMPTS), f"The excuse of the day: {excuse}"
        if task in ("verse_book", "verse_ref", "verse_any"):
            v = rng.choice(it.verses)
            ref = f"{v['book']} {v['chapter']}:{v['verse']}"
            if task == "verse_ref":
                return rng.choice(VERSE_REF_PROMPTS).format(r=ref), v["text"]
            prompt = rng.choice(VERSE_BOOK_PROMPTS).format(b=v["book"]) if task == "verse_book" \
                else rng.choice(VERSE_ANY_PROMPTS)
            return prompt, f"{ref}: {v['text']}"
        if task == "continue":
            s = rng.choice(it.sentences)
            words = s.split(" ")
            cut = rng.randint(max(2, len(words) // 3), max(3, (2 * len(words)) // 3))
            return rng.choice(CONTINUE_PROMPTS).format(p=" ".join(words[:cut])), " ".join(words[cut:])
        if task == "define":
            return self._define(rng.choice(it.wordnet), rng.choice(DEFINE_PROMPTS))
        if task == "devil":
            r = rng.choice(it.devil)
            word = r.get("headword", "").lower() or r["text"].split(",")[0].lower()
            return rng.choice(DEVIL_PROMPTS).format(w=word), _paragraphs_upto(r["text"], MAX_ANSWER_CHARS)
        if task == "jargon":
            r = rng.choice(it.jargon)
            head, _, body = r["text"].partition("\n")
            paras = [p for p in body.split("\n\n") if p.strip()]
            if paras and (paras[0].startswith("/") or len(paras[0]) < 25):
                paras = paras[1:]   # pronunciation and part of speech
            body = _paragraphs_upto("\n\n".join(paras), MAX_ANSWER_CHARS) if paras else body.strip()
            return rng.choice(JARGON_PROMPTS).format(w=head.strip()), f"{head.strip()}: {body}"
        if task == "pyapi":
            r = rng.choice(it.pyapi)
            name = _pyapi_display_name(r)
            summary = _first_sentences(r["text"], 300)
            return (rng.choice(PYAPI_PROMPTS).format(n=name, k=r.get("kind") or "object"),
                    f"{r.get('signature', name)}\n\n{summary}")
        if task == "greeting":
            return rng.choice(GREETINGS), rng.choice(GREETING_ANSWERS)
        raise DataError(f"unknown task {task}")

    def _define(self, r: dict[str, Any], prompt: str) -> tuple[str, str]:
        lemma = r["lemmas"][0]
        body = r["text"].split("): ", 1)[1]
        definition, _, examples = body.partition('; "')
        pos = r.get("pos", "word")
        answer = f'"{lemma}" is {_article(pos)} {pos} meaning {definition.rstrip(". ")}.'
        if examples:
            first = examples.split('"', 1)[0].strip()
            if first:
                answer += f' For example: "{first}".'
        return prompt.format(w=lemma), answer

    def conversation(self) -> list[dict[str, str]]:
        rng = self.rng
        msgs: list[dict[str, str]] = []
        roll = rng.random()
        if roll < 0.05 and self.items.fortunes:
            msgs.append({"role": "system", "content": FORTUNE_SYSTEM})
            user = rng.choice(GREETINGS + ["What do you think?", "Tell me something.", "Go on."])
            msgs += [{"role": "user", "content": user},
                     {"role": "assistant", "content": rng.choice(self.items.fortunes)["text"]}]
            return msgs
        if roll < 0.09 and self.items.wordnet:
            msgs.append({"role": "system", "content": DICTIONARY_SYSTEM})
            q, a = self._define(rng.choice(self.items.wordnet), "{w}")
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            return msgs
        if roll < 0.12 and self.items.verses:
            msgs.append({"role": "system", "content": BIBLE_SYSTEM})
            v = rng.choice(self.items.verses)
            msgs += [{"role": "user", "content": rng.choice(["Hello", "Give me a verse.", "Another one.", "Go ahead."])},
                     {"role": "assistant", "content": f"{v['book']} {v['chapter']}:{v['verse']}: {v['text']}"}]
            return msgs
        if roll < 0.30:
            msgs.append({"role": "system", "content": rng.choice(GENERIC_SYSTEMS)})
        turns = 1 if rng.random() < 0.7 else rng.randint(2, 3)
        for t in range(turns):
            if t > 0 and rng.random() < 0.25:
                msgs += [{"role": "user", "content": rng.choice(THANKS)},
                         {"role": "assistant", "content": rng.choice(THANKS_ANSWERS)}]
                continue
            task = rng.choices(self.tasks, weights=self.weights, k=1)[0]
            q, a = self.exchange(task)
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a.strip()}]
        return msgs

    def conversations(self, n: int) -> list[list[dict[str, str]]]:
        return [self.conversation() for _ in range(n)]


# Fixed prompts for samples and goldens (not drawn from the split).
SAMPLE_CHATS: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "Tell me a fortune."}],
    [{"role": "user", "content": "Quote a verse from Genesis."}],
    [{"role": "user", "content": 'What does the word "lantern" mean?'}],
    [{"role": "user", "content": "What is a kluge in hacker slang?"}],
    [{"role": "user", "content": "What does os.path.join do in Python?"}],
    [{"role": "user", "content": "Continue: The quick brown fox"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "Hello, who are you?"}],
    [{"role": "user", "content": "Tell me a riddle."},
     {"role": "assistant", "content": "What has keys but can't open locks? A piano."},
     {"role": "user", "content": "Now tell me a fortune about computers."}],
]
SAMPLE_TEXTS = ["In the beginning", "The Devil's Dictionary defines", "def fibonacci(n):"]
GOLDEN_CHATS: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "Tell me a fortune."}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": 'What does the word "river" mean?'}],
    [{"role": "user", "content": "Quote a verse from Psalms."},
     {"role": "assistant", "content": "Psalms 23:1: The LORD is my shepherd; I shall not want."},
     {"role": "user", "content": "Continue: And God said, Let there be"}],
]


def iter_texts(docs: Iterable[Doc]) -> Iterable[str]:
    for d in docs:
        yield d.text
