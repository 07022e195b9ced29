"""The demo model's tokenizer: a Gemma-style BPE (byte fallback, SentencePiece `▁` spaces) with Gemma 4's
special tokens at Gemma 4's ids, trained with Hugging Face `tokenizers`.

Layout of the ids (everything below FIRST_LEARNED_ID is fixed, whatever the corpus):

    0 <pad>  1 <eos>  2 <bos>  3 <unk>  4 <mask>  5 [multimodal]
    46 <|tool>  47 <tool|>  48 <|tool_call>  49 <tool_call|>  50 <|tool_response>  51 <tool_response|>  52 <|"|>
    98 <|think|>  100 <|channel>  101 <channel|>  105 <|turn>  106 <turn|>
    other ids < 107: <unused0> ... <unused88>  (Gemma's own placeholders)
    107..137   "\\n" x 1..31   (added tokens, not special: newlines never merge with text, as in Gemma 3)
    138..393   <0x00>..<0xFF>  (byte fallback)
    394..      learned pieces: the alphabet, then merges in training order

The ids of the Gemma 4 specials are the public ones of the Gemma 4 tokenizer (<|turn>=105, <turn|>=106,
<|channel>=100, <channel|>=101, <|think|>=98, tool tokens 46..52), as used by several open-source Gemma 4
integrations; <pad>/<eos>/<bos>/<unk> are Gemma's 0..3.

The runtime pipeline mirrors Gemma 3's tokenizer.json exactly: normalizer Replace(" " -> "▁"), a Split(" ")
pre-tokenizer (a no-op after the normalizer: BPE sees whole newline-free segments), post-processor
"<bos> $A", decoder Replace("▁" -> " ") + ByteFallback + Fuse. Training uses an extra pre-tokenizer
(digits alone; "▁*word" pieces) that keeps every learned merge inside such a piece. No merge can then join
two pieces, so the runtime tokenizer (without that pre-tokenizer) segments text exactly as training did;
`check_runtime_matches_training` verifies it on a sample.

Only `train_tokenizer` and the `check_*` functions need the `tokenizers` package; the rest is plain Python.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

SPACE = "\u2581"  # ▁

GEMMA4_SPECIALS: dict[int, str] = {
    0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>",
    46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>",
    50: "<|tool_response>", 51: "<tool_response|>", 52: '<|"|>',
    98: "<|think|>", 100: "<|channel>", 101: "<channel|>",
    105: "<|turn>", 106: "<turn|>",
}
# Present in Gemma's vocabularies at these ids but not special (Gemma 3 marks them special=false).
GEMMA_PLAIN_RESERVED: dict[int, str] = {4: "<mask>", 5: "[multimodal]"}

PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
TURN_OPEN_ID, TURN_CLOSE_ID = 105, 106
FIRST_NEWLINE_ID = 107
NEWLINE_RUNS = 31
FIRST_BYTE_ID = FIRST_NEWLINE_ID + NEWLINE_RUNS          # 138
FIRST_LEARNED_ID = FIRST_BYTE_ID + 256                    # 394

TRAIN_DIGITS_PATTERN = r"\p{N}"
TRAIN_PIECE_PATTERN = SPACE + r"*[^" + SPACE + r"\p{N}]+|" + SPACE + "+"
MAX_TOKEN_LENGTH = 16
MIN_FREQUENCY = 2
LIMIT_ALPHABET = 160
INITIAL_ALPHABET = [chr(c) for c in range(33, 127)] + [SPACE, "\t", "\u2019", "\u201c", "\u201d", "\u2014",
                                                       "\u2013", "\u2018", "\u2026", "\u00e9"]


class TokenizerBuildError(RuntimeError):
    pass


def reserved_tokens() -> list[tuple[int, str, bool, bool]]:
    """(id, content, special, is_added_token) for ids [0, FIRST_LEARNED_ID)."""
    out = []
    unused = 0
    for i in range(FIRST_NEWLINE_ID):
        if i in GEMMA4_SPECIALS:
            out.append((i, GEMMA4_SPECIALS[i], True, True))
        elif i in GEMMA_PLAIN_RESERVED:
            out.append((i, GEMMA_PLAIN_RESERVED[i], False, True))
        else:
            out.append((i, f"<unused{unused}>", False, True))
            unused += 1
    for k in range(NEWLINE_RUNS):
        out.append((FIRST_NEWLINE_ID + k, "\n" * (k + 1), False, True))
    for b in range(256):
        out.append((FIRST_BYTE_ID + b, f"<0x{b:02X}>", False, False))
    assert len(out) == FIRST_LEARNED_ID and [t[0] for t in out] == list(range(FIRST_LEARNED_ID))
    return out


def special_token_ids() -> dict[str, int]:
    return {content: i for i, content in GEMMA4_SPECIALS.items()}


def training_lines(texts: Iterable[str]) -> Iterator[str]:
    """Newline-free segments of the texts: newlines are added tokens at run time and never reach BPE."""
    for text in texts:
        for line in text.split("\n"):
            if line.strip():
                yield line


def strip_special_strings(text: str) -> str:
    """Special-token strings replaced by line breaks, so that tokenizer training on rendered chats learns
    the words around them ("user", "model") but never a piece of a special token."""
    for special in sorted(set(GEMMA4_SPECIALS.values()), key=len, reverse=True):
        text = text.replace(special, "\n")
    return text


def _merge_pair(m: Any) -> tuple[str, str]:
    if isinstance(m, str):
        parts = m.split(" ")
        if len(parts) != 2:
            raise TokenizerBuildError(f"cannot parse merge {m!r}")
        return parts[0], parts[1]
    if isinstance(m, (list, tuple)) and len(m) == 2 and all(isinstance(p, str) for p in m):
        return m[0], m[1]
    raise TokenizerBuildError(f"cannot parse merge {m!r}")


def finalize_tokenizer_json(trained: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """The shipped tokenizer.json from a trained BPE (`Tokenizer.to_str()` of the training tokenizer):
    reserved ids first, then the learned pieces in training order (truncated to `vocab_size`), with the
    Gemma 3 runtime pipeline. Raises TokenizerBuildError on anything inconsistent."""
    model = trained.get("model") or {}
    if model.get("type") != "BPE":
        raise TokenizerBuildError(f"trained model type is {model.get('type')!r}, expected BPE")
    trained_vocab: dict[str, int] = model.get("vocab") or {}
    if not trained_vocab:
        raise TokenizerBuildError("trained vocabulary is empty")
    reserved = reserved_tokens()
    reserved_contents = {c for _, c, _, _ in reserved}
    vocab: dict[str, int] = {c: i for i, c, _, _ in reserved}
    learned = [p for p, _ in sorted(trained_vocab.items(), key=lambda kv: kv[1]) if p not in reserved_contents]
    budget = vocab_size - FIRST_LEARNED_ID
    if budget <= 0:
        raise TokenizerBuildError(f"vocab_size {vocab_size} leaves no room after {FIRST_LEARNED_ID} reserved ids")
    if len(learned) < budget:
        raise TokenizerBuildError(f"training produced {len(learned)} pieces; {budget} needed for vocab {vocab_size}"
                                  " (corpus too small or min_frequency too high)")
    for p in learned[:budget]:
        vocab[p] = len(vocab)
    if SPACE not in vocab:
        raise TokenizerBuildError("the learned alphabet has no '▁'")
    merges = []
    for m in model.get("merges") or []:
        a, b = _merge_pair(m)
        if a in vocab and b in vocab and (a + b) in vocab:
            merges.append([a, b])
        elif (a + b) in vocab:
            raise TokenizerBuildError(f"merge {a!r}+{b!r} produces a kept piece from a dropped one")
    # every learned multi-character piece must be reachable by a merge
    produced = {a + b for a, b in merges}
    unreachable = [p for p in learned[:budget] if len(p) > 1 and p not in produced]
    if unreachable:
        raise TokenizerBuildError(f"{len(unreachable)} learned pieces have no merge, e.g. {unreachable[:5]}")
    if len(vocab) != vocab_size:
        raise TokenizerBuildError(f"internal: vocabulary has {len(vocab)} entries, expected {vocab_size}")

    def added(i: int, content: str, special: bool) -> dict[str, Any]:
        return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": special}

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added(i, c, s) for i, c, s, is_added in reserved if is_added],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<bos>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [BOS_ID], "tokens": ["<bos>"]}},
        },
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ]},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
            "vocab": vocab, "merges": merges,
        },
    }


def tokenizer_config(chat_template: str, model_max_length: int) -> dict[str, Any]:
    """tokenizer_config.json (transformers): Gemma's special tokens and defaults, the chat template."""
    decoder = {}
    for i, content, special, is_added in reserved_tokens():
        if is_added:
            decoder[str(i)] = {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                               "single_word": False, "special": special}
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": decoder,
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "padding_side": "left",
        "spaces_between_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": chat_template,
    }


def special_tokens_map() -> dict[str, Any]:
    def tok(c: str) -> dict[str, Any]:
        return {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    return {"bos_token": tok("<bos>"), "eos_token": tok("<eos>"), "pad_token": tok("<pad>"),
            "unk_token": tok("<unk>")}


# ------------------------------------------------------------------------------------------------
# Parts that need the `tokenizers` package
# ------------------------------------------------------------------------------------------------


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> tuple[Any, Any, dict[str, Any]]:
    """Trains the BPE and returns (runtime Tokenizer, training Tokenizer, tokenizer.json dict).
    Deterministic for a given text order (HF's BPE trainer breaks count ties by pair order)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    train_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    train_tok.normalizer = normalizers.Replace(" ", SPACE)
    train_tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(TRAIN_DIGITS_PATTERN), behavior="isolated"),
        pre_tokenizers.Split(Regex(TRAIN_PIECE_PATTERN), behavior="isolated"),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - FIRST_LEARNED_ID,
        min_frequency=MIN_FREQUENCY,
        show_progress=False,
        special_tokens=[],
        limit_alphabet=LIMIT_ALPHABET,
        initial_alphabet=INITIAL_ALPHABET,
        max_token_length=MAX_TOKEN_LENGTH,
    )
    lines = list(training_lines(texts))
    train_tok.train_from_iterator(lines, trainer=trainer, length=len(lines))
    final = finalize_tokenizer_json(json.loads(train_tok.to_str()), vocab_size)
    runtime = Tokenizer.from_str(json.dumps(final, ensure_ascii=False))
    return runtime, train_tok, final


def check_tokenizer(tok: Any, vocab_size: int) -> list[str]:
    """Fatal problems of a runtime tokenizer (ids, specials, round trips); empty list when all is well."""
    problems = []
    if tok.get_vocab_size(with_added_tokens=True) != vocab_size:
        problems.append(f"vocab size {tok.get_vocab_size(with_added_tokens=True)} != {vocab_size}")
    for i, content, _, _ in reserved_tokens():
        got = tok.token_to_id(content)
        if got != i:
            problems.append(f"token {content!r} has id {got}, expected {i}")
    chat = "<bos><|turn>user\nHello there!<turn|>\n<|turn>model\n"
    ids = tok.encode(chat, add_special_tokens=False).ids
    if ids[:2] != [BOS_ID, TURN_OPEN_ID] or FIRST_NEWLINE_ID not in ids or ids.count(TURN_CLOSE_ID) != 1:
        problems.append(f"chat prefix encodes to {ids}")
    if tok.encode("Hi", add_special_tokens=True).ids[0] != BOS_ID:
        problems.append("add_special_tokens=True does not prepend <bos>")
    samples = ["In the beginning God created the heaven and the earth.",
               "  two  spaces,\ttab, trailing space ", "Numbers 3:16 and 1611 and 3.14159",
               "naïve café — “quotes” 中文 🙂", "def f(x):\n    return x ** 2\n\n\nprint(f(3))",
               "<|turn> inside text <turn|> and <|think|>", ""]
    for s in samples:
        enc = tok.encode(s, add_special_tokens=False)
        back = tok.decode(enc.ids, skip_special_tokens=False)
        if back != s:
            problems.append(f"round trip failed: {s!r} -> {enc.tokens} -> {back!r}")
        if UNK_ID in enc.ids:
            problems.append(f"<unk> produced for {s!r} (byte fallback broken?)")
    return problems


def check_runtime_matches_training(runtime: Any, train_tok: Any, lines: list[str]) -> tuple[int, list[str]]:
    """Number of sample lines whose segmentation differs between the runtime and training tokenizers.
    Lines with characters outside the learned alphabet are skipped: the training tokenizer has no byte
    tokens to fall back to."""
    alphabet = {p for p in train_tok.get_vocab() if len(p) == 1}
    lines = [line for line in lines if set(line.replace(" ", SPACE)) <= alphabet]
    a = runtime.encode_batch(lines, add_special_tokens=False)
    b = train_tok.encode_batch(lines, add_special_tokens=False)
    diffs = []
    for line, x, y in zip(lines, a, b):
        if x.tokens != y.tokens:
            diffs.append(f"{line[:60]!r}: runtime {x.tokens[:12]} vs training {y.tokens[:12]}")
    return len(diffs), diffs[:5]
