#!/usr/bin/env python3
"""Trains lmx's demo model: a ~19 M-parameter Gemma 4 text model (E2B recipe scaled down) with its own
Gemma-style tokenizer, on the public-domain / permissively licensed corpus of scripts/fetch_demo_corpus.sh.

    python3 tools/train_demo/train.py --corpus .demo-corpus --out models/demo --seed 0 [--max-minutes 7]
    python3 tools/train_demo/train.py --smoke --corpus .demo-corpus --out /tmp/demo-smoke   # ~1 min check
    python3 tools/train_demo/train.py --self-test [--corpus .demo-corpus]                  # no GPU, no HF libs

Stages: tokenizer (HF tokenizers BPE, byte fallback, `▁` spaces, Gemma 4 special ids) -> pretraining on
packed 512-token rows (bf16 autocast, AdamW, cosine LR) -> instruction-style finetune on synthetic
conversations rendered through the chat template (loss on model turns only) -> export (bf16 safetensors
with HF text-export names, config, generation config, tokenizer files, chat template) -> goldens (float32,
eager attention, TF32 off: logits of three chat prompts and 20-token greedy continuations) ->
train_report.json.

Time: `--max-minutes` bounds the whole run. Pretraining plans its steps from `--pretrain-epochs`, cuts
the plan once after measuring its speed if the plan would not fit, and stops at a wall-clock guard in any
case; the export always runs. Everything is written to a temporary folder first and moved to --out only
when every stage succeeded.

Exit status: 0 ok; 1 fatal (nothing written to --out); 2 written, but the float64 re-implementation of
docs/gemma4-transformers-notes.md disagrees with transformers on a golden prompt (see the banner).

Needs (GPU machine): torch, transformers 5.x (Gemma 4), tokenizers, safetensors, numpy, jinja2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tools"))

import demo_data as dd  # noqa: E402
import demo_tokenizer as dt  # noqa: E402
import make_reference_models as mrm  # noqa: E402  (torch-free at import time)

SLIDING, FULL = mrm.SLIDING, mrm.FULL
MAX_CHECKPOINT_BYTES = 40_000_000

# ------------------------------------------------------------------------------------------------
# Architecture
# ------------------------------------------------------------------------------------------------


def model_spec(vocab_size: int, smoke: bool = False) -> dict[str, Any]:
    """Gemma4TextConfig kwargs. E2B recipe scaled down: PLE, the last 4 layers share the KV of layers
    5 (sliding) and 4 (full), double-wide MLP in those 4 layers, 1 KV head, sliding window 256 on 8 of
    10 layers, proportional RoPE on the 2 full layers, final logit softcapping 30, tied embeddings."""
    S, F = SLIDING, FULL
    spec = {
        "vocab_size": vocab_size,
        "hidden_size": 384,
        "intermediate_size": 640,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "global_head_dim": 128,
        "layer_types": [S, S, S, S, F, S, S, S, S, F],
        "sliding_window": 256,
        "hidden_size_per_layer_input": 32,
        "vocab_size_per_layer_input": vocab_size,
        "num_kv_shared_layers": 4,
        "use_double_wide_mlp": True,
        "attention_k_eq_v": False,
        "enable_moe_block": False,
        "final_logit_softcapping": 30.0,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "pad_token_id": dt.PAD_ID,
        "eos_token_id": dt.EOS_ID,
        "bos_token_id": dt.BOS_ID,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_cache": True,
        "rope_parameters": json.loads(json.dumps(mrm.DEFAULT_ROPE)),
    }
    if smoke:
        spec.update(hidden_size=64, intermediate_size=96, head_dim=16, global_head_dim=32, sliding_window=32,
                    hidden_size_per_layer_input=8, max_position_embeddings=512)
    spec["num_hidden_layers"] = len(spec["layer_types"])
    return spec


def param_summary(spec: dict[str, Any]) -> dict[str, Any]:
    shapes = mrm.expected_state_dict_shapes(spec)
    total = sum(math.prod(s) for s in shapes.values())
    embed = math.prod(shapes["model.embed_tokens.weight"])
    ple = math.prod(shapes.get("model.embed_tokens_per_layer.weight", (0,)))
    return {"total": total, "embedding": embed, "ple_table": ple, "other": total - embed - ple,
            "tensors": len(shapes), "bf16_bytes": 2 * total}


def check_spec(spec: dict[str, Any], smoke: bool) -> dict[str, Any]:
    """Static assertions on the architecture (torch-free)."""
    geo = mrm.layer_geometry(spec)
    problems = []
    if not spec["hidden_size_per_layer_input"] > 0:
        problems.append("PLE must be on")
    if not any(g["kv_shared"] for g in geo):
        problems.append("KV sharing must be on")
    types = {g["layer_type"] for g in geo}
    if types != {SLIDING, FULL} or geo[-1]["layer_type"] != FULL:
        problems.append("need sliding and full layers, the last one full")
    if spec["rope_parameters"][FULL].get("rope_type") != "proportional":
        problems.append("full layers must use proportional RoPE")
    if spec["final_logit_softcapping"] != 30.0 or not spec["tie_word_embeddings"]:
        problems.append("softcapping 30 and tied embeddings are part of the recipe")
    donors = {g["kv_donor"] for g in geo if g["kv_shared"]}
    if len(donors) != 2:
        problems.append(f"expected one sliding and one full donor, got {donors}")
    ps = param_summary(spec)
    if not smoke:
        if not 10e6 <= ps["total"] <= 40e6:
            problems.append(f"{ps['total'] / 1e6:.2f} M parameters is outside 10-40 M")
        if ps["bf16_bytes"] > MAX_CHECKPOINT_BYTES - 100_000:
            problems.append(f"bf16 checkpoint would be {ps['bf16_bytes'] / 1e6:.2f} MB (> 40 MB)")
    if problems:
        raise mrm.FatalError("architecture spec: " + "; ".join(problems))
    return ps


# ------------------------------------------------------------------------------------------------
# Settings
# ------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".demo-corpus", help="folder written by scripts/fetch_demo_corpus.sh")
    ap.add_argument("--out", default="models/demo", help="output model folder (replaced on success)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=7.0,
                    help="wall-clock budget of the whole run, export included (default 7)")
    ap.add_argument("--reserve-seconds", type=float, default=75.0,
                    help="time kept for samples, export and goldens after training (default 75)")
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cuda, cuda:N, cpu")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=512, help="pretraining row length in tokens, <bos> included")
    ap.add_argument("--batch-size", type=int, default=64, help="pretraining rows per step")
    ap.add_argument("--pretrain-epochs", type=float, default=12.0,
                    help="passes over the weighted pretraining mix (caps the step count)")
    ap.add_argument("--pretrain-steps", type=int, default=0, help="hard cap on pretraining steps (0 = none)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--finetune-steps", type=int, default=600)
    ap.add_argument("--finetune-batch-size", type=int, default=32)
    ap.add_argument("--finetune-lr", type=float, default=5e-4)
    ap.add_argument("--finetune-seq-len", type=int, default=512, help="longest conversation kept, in tokens")
    ap.add_argument("--finetune-mix-every", type=int, default=4,
                    help="every Nth finetune step is a pretraining batch (0 = never), against forgetting")
    ap.add_argument("--val-fraction", type=float, default=0.02, help="documents held out for validation")
    ap.add_argument("--val-rows-per-source", type=int, default=16)
    ap.add_argument("--val-conversations", type=int, default=400)
    ap.add_argument("--no-keep-best", action="store_true",
                    help="keep the last pretraining weights even if an earlier evaluation was better")
    ap.add_argument("--no-deterministic", action="store_true", help="allow non-deterministic CUDA kernels")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model for training (off: safer)")
    ap.add_argument("--bundle-dir", default="",
                    help="also write OUT as a tar split into <=15 MiB parts (OUTNAME.tar.00, .01, ...) plus "
                         "OUTNAME.tar.sha256 into this folder, for copying back from a machine that limits file sizes")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny model, 1024-token vocab, a few steps: checks the whole pipeline in about a minute")
    ap.add_argument("--self-test", action="store_true",
                    help="test the parts that need neither transformers nor tokenizers (runs on CPU), then exit")
    args = ap.parse_args(argv)
    if args.smoke:
        args.vocab_size = 1024
        args.seq_len = 128
        args.batch_size = 8
        args.pretrain_steps = args.pretrain_steps or 40
        args.finetune_steps = min(args.finetune_steps, 20)
        args.finetune_batch_size = 8
        args.finetune_seq_len = 256
        args.eval_every = 20
        args.val_rows_per_source = 2
        args.val_conversations = 16
        args.warmup_steps = 5
    return args


# ------------------------------------------------------------------------------------------------
# Small utilities
# ------------------------------------------------------------------------------------------------


class Clock:
    def __init__(self, minutes: float):
        self.start = time.monotonic()
        self.deadline = self.start + 60.0 * minutes
        self.marks: dict[str, float] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def mark(self, name: str, since: float) -> None:
        self.marks[name] = round(time.monotonic() - since, 2)


def log(msg: str = "") -> None:
    print(msg, flush=True)


def die(msg: str) -> None:
    raise mrm.FatalError(msg)


def lr_at(step: int, total: int, peak: float, warmup: int, min_ratio: float) -> float:
    """Linear warmup to `peak`, then cosine decay to `min_ratio * peak` at `total`."""
    warmup = max(1, min(warmup, total // 10 if total >= 20 else 1))
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def sha256_file(path: Path) -> str:
    return mrm.file_sha256(path)


# ------------------------------------------------------------------------------------------------
# Token streams and batches (numpy / torch)
# ------------------------------------------------------------------------------------------------


class PretrainData:
    """Per-source token streams (documents in a seeded random order, each followed by <eos>).
    A row is <bos> + seq_len stream tokens taken at a random offset of a source chosen with
    probability proportional to its weighted size; inputs are the first seq_len tokens of the row,
    targets the last seq_len."""

    def __init__(self, np: Any, torch: Any, device: str, ids_by_source: dict[str, list[list[int]]],
                 weights: dict[str, float], seq_len: int, seed: int):
        self.np, self.torch, self.device, self.seq_len = np, torch, device, seq_len
        rng = np.random.default_rng(seed)
        streams, self.sources, self.starts, self.lengths, self.docs = [], [], [], [], {}
        pos = 0
        for source in sorted(ids_by_source):
            docs = ids_by_source[source]
            order = rng.permutation(len(docs))
            parts = []
            for i in order:
                parts.append(np.asarray(docs[i], dtype=np.int32))
                parts.append(np.asarray([dt.EOS_ID], dtype=np.int32))
            stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
            self.docs[source] = len(docs)
            if len(stream) < seq_len + 1:
                log(f"  note: source {source} has {len(stream)} tokens (< row length); left out of sampling")
                continue
            streams.append(stream)
            self.sources.append(source)
            self.starts.append(pos)
            self.lengths.append(len(stream))
            pos += len(stream)
        if not streams:
            die("no source has enough tokens for one row")
        self.tokens = {s: n for s, n in zip(self.sources, self.lengths)}
        w = np.asarray([weights.get(s, 1.0) * n for s, n in zip(self.sources, self.lengths)], dtype=np.float64)
        self.probs = w / w.sum()
        self.weighted_tokens = float(sum(weights.get(s, 1.0) * n for s, n in zip(self.sources, self.lengths)))
        self.all = torch.from_numpy(np.concatenate(streams).astype(np.int64)).to(device)
        self.rng = np.random.default_rng(seed + 7919)
        self.arange = torch.arange(seq_len, device=device)

    def batch(self, batch_size: int) -> tuple[Any, Any]:
        np, torch = self.np, self.torch
        src = self.rng.choice(len(self.sources), size=batch_size, p=self.probs)
        starts = np.asarray(self.starts)[src]
        spans = np.asarray(self.lengths)[src] - self.seq_len
        offsets = starts + (self.rng.random(batch_size) * spans).astype(np.int64)
        idx = torch.from_numpy(offsets).to(self.device)[:, None] + self.arange[None, :]
        body = self.all[idx]                                             # [B, seq_len]
        bos = torch.full((batch_size, 1), dt.BOS_ID, dtype=body.dtype, device=self.device)
        row = torch.cat([bos, body], dim=1)                              # [B, seq_len + 1]
        return row[:, :-1].contiguous(), row[:, 1:].contiguous()

    def fixed_rows(self, source: str, max_rows: int) -> tuple[Any, Any] | None:
        """Non-overlapping rows from the start of a source's stream (validation)."""
        torch = self.torch
        if source not in self.sources:
            return None
        k = self.sources.index(source)
        n = min(max_rows, (self.lengths[k] - 1) // self.seq_len)
        if n <= 0:
            return None
        offsets = torch.arange(n, device=self.device) * self.seq_len + self.starts[k]
        body = self.all[offsets[:, None] + self.arange[None, :]]
        bos = torch.full((n, 1), dt.BOS_ID, dtype=body.dtype, device=self.device)
        row = torch.cat([bos, body], dim=1)
        return row[:, :-1].contiguous(), row[:, 1:].contiguous()


def chat_batches(np: Any, torch: Any, device: str, examples: list[tuple[list[int], list[int]]],
                 batch_size: int, seed: int) -> Any:
    """Endless iterator of (inputs, targets) for conversations: one conversation a row, right-padded with
    <pad> to the longest row of the batch (rounded up to 16); targets are -100 except where the next token
    belongs to a model turn."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(examples))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield collate_chat(torch, device, [examples[j] for j in order[i:i + batch_size]])


def collate_chat(torch: Any, device: str, rows: list[tuple[list[int], list[int]]]) -> tuple[Any, Any]:
    width = max(len(ids) for ids, _ in rows) - 1
    width = ((width + 15) // 16) * 16
    inputs = torch.full((len(rows), width), dt.PAD_ID, dtype=torch.long)
    targets = torch.full((len(rows), width), -100, dtype=torch.long)
    for r, (ids, mask) in enumerate(rows):
        n = len(ids) - 1
        inputs[r, :n] = torch.tensor(ids[:-1], dtype=torch.long)
        tgt = torch.tensor(ids[1:], dtype=torch.long)
        keep = torch.tensor(mask[1:], dtype=torch.bool)
        targets[r, :n] = torch.where(keep, tgt, torch.full_like(tgt, -100))
    return inputs.to(device), targets.to(device)


# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------


def forward_loss(torch: Any, model: Any, inputs: Any, targets: Any, autocast: bool,
                 reduction: str = "mean") -> Any:
    """Cross-entropy of the causal LM. The decoder runs under bf16 autocast; the tied head and the final
    logit softcapping run in float32 (the same math as Gemma4ForCausalLM.forward, without rounding the
    logits to bf16). With --compile, `model.__dict__["_lmx_body"]` holds a torch.compile'd `model.model`
    (kept out of the module tree, so it is not in the state_dict)."""
    F = torch.nn.functional
    body = model.__dict__.get("_lmx_body") or model.model
    with torch.autocast(device_type=inputs.device.type, dtype=torch.bfloat16, enabled=autocast):
        hidden = body(input_ids=inputs, use_cache=False).last_hidden_state
    logits = F.linear(hidden.float(), model.lm_head.weight.float())
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100, reduction=reduction)


def make_optimizer(torch: Any, model: Any, lr: float, weight_decay: float, device: str) -> Any:
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=lr, betas=(0.9, 0.95), eps=1e-8)
    if device.startswith("cuda"):
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, **kwargs)


def evaluate_rows(torch: Any, model: Any, rows: list[tuple[Any, Any]], autocast: bool, batch: int = 16) -> tuple[float, int]:
    """Token-weighted mean loss over (inputs, targets) row blocks."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for inputs, targets in rows:
            for i in range(0, inputs.shape[0], batch):
                x, y = inputs[i:i + batch], targets[i:i + batch]
                total += float(forward_loss(torch, model, x, y, autocast, reduction="sum"))
                count += int((y != -100).sum())
    model.train()
    return (total / max(count, 1)), count


def train_phase(name: str, torch: Any, model: Any, step_fn_batch: Any, *, planned_steps: int, lr: float,
                warmup: int, min_ratio: float, weight_decay: float, deadline: float, device: str,
                autocast: bool, eval_fn: Any = None, eval_every: int = 0, keep_best: bool = False,
                calibrate: bool = True, log_every: int = 50) -> dict[str, Any]:
    """Runs up to `planned_steps` optimizer steps, stopping at `deadline` (time.monotonic()). At steps 30
    and 200 the measured speed sets the plan to min(planned_steps, what fits before the deadline), so the
    cosine schedule still ends at its floor; the wall-clock guard stops the loop in any case. Returns a
    summary with the loss curve."""
    opt = make_optimizer(torch, model, lr, weight_decay, device)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    total = max(1, planned_steps)
    curve, evals = [], []
    t0 = time.monotonic()
    t_calib = None
    stopped_by_time = False
    autoscaled_from = None
    best = (math.inf, -1)
    best_state = None
    tokens = None   # a device tensor: reading it every step would synchronise with the GPU
    step = 0
    while step < total:
        now = time.monotonic()
        if now > deadline:
            stopped_by_time = True
            log(f"  [{name}] wall-clock guard: stopping at step {step} of {total}")
            break
        if calibrate and step in (10, 30, 200):
            if device.startswith("cuda"):
                torch.cuda.synchronize()   # the CPU may run ahead of the GPU
            now = time.monotonic()
            if step == 10:
                t_calib = now
            elif t_calib is not None:
                rate = (step - 10) / max(1e-6, now - t_calib)
                affordable = step + int(0.95 * rate * (deadline - now))
                new_total = max(step + 1, min(max(1, planned_steps), affordable))
                if new_total != total:
                    if autoscaled_from is None:
                        autoscaled_from = max(1, planned_steps)
                    log(f"  [{name}] {rate:.1f} steps/s: plan {total} -> {new_total} steps to fit the time budget")
                    total = new_total
        cur_lr = lr_at(step, total, lr, warmup, min_ratio)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        inputs, targets = step_fn_batch(step)
        loss = forward_loss(torch, model, inputs, targets, autocast)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        n = (targets != -100).sum()
        tokens = n if tokens is None else tokens + n
        if step % log_every == 0 or step == total - 1:
            el = time.monotonic() - t0
            lv = float(loss)
            if not math.isfinite(lv):
                die(f"[{name}] loss is {lv} at step {step}")
            curve.append({"step": step, "loss": round(lv, 4), "lr": cur_lr,
                          "grad_norm": round(float(gnorm), 3), "elapsed_s": round(el, 1)})
            log(f"  [{name}] step {step:5d}/{total}  loss {lv:.4f}  lr {cur_lr:.2e}  "
                f"|g| {float(gnorm):.2f}  {int(tokens) / max(el, 1e-6) / 1e3:.0f}k tok/s  {el:.0f}s")
        step += 1
        if eval_fn is not None and eval_every and (step % eval_every == 0 or step == total):
            v = eval_fn()
            evals.append({"step": step, "val_loss": round(v, 4), "elapsed_s": round(time.monotonic() - t0, 1)})
            log(f"  [{name}] step {step}: validation loss {v:.4f} (ppl {math.exp(v):.2f})")
            if keep_best and v < best[0]:
                best = (v, step)
                best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
    restored = None
    if keep_best and best_state is not None and evals and evals[-1]["val_loss"] > best[0] * 1.01:
        model.load_state_dict(best_state)
        restored = best[1]
        log(f"  [{name}] restored the weights of step {best[1]} (validation loss {best[0]:.4f} < "
            f"{evals[-1]['val_loss']:.4f} at the end)")
    return {"steps": step, "planned_steps": total, "autoscaled_from": autoscaled_from,
            "stopped_by_wall_clock": stopped_by_time, "tokens_seen": int(tokens) if tokens is not None else 0,
            "seconds": round(time.monotonic() - t0, 1), "curve": curve, "evals": evals,
            "restored_best_step": restored}


# ------------------------------------------------------------------------------------------------
# Generation (samples)
# ------------------------------------------------------------------------------------------------


def generate(torch: Any, model: Any, ids: list[int], max_new: int, device: str, *, sample: bool,
             temperature: float = 0.8, top_p: float = 0.95, top_k: int = 64, seed: int = 0,
             stop: tuple[int, ...] = (dt.EOS_ID, dt.TURN_CLOSE_ID)) -> list[int]:
    """Greedy or top-k/top-p sampling with the KV cache (falls back to full re-forwards on any error)."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def pick(row: Any) -> int:
        row = row.float()
        if not sample:
            return int(torch.argmax(row))
        row = row / max(temperature, 1e-5)
        if top_k > 0:
            kth = torch.topk(row, min(top_k, row.numel())).values[-1]
            row = torch.where(row < kth, torch.full_like(row, -math.inf), row)
        probs = torch.softmax(row, dim=-1)
        sp, si = torch.sort(probs, descending=True)
        cum = torch.cumsum(sp, dim=-1)
        cut = cum - sp > top_p
        sp = torch.where(cut, torch.zeros_like(sp), sp)
        choice = torch.multinomial(sp / sp.sum(), 1, generator=gen)
        return int(si[choice])

    out: list[int] = []
    model.eval()
    with torch.no_grad():
        try:
            res = model(input_ids=torch.tensor([ids], device=device), use_cache=True)
            pkv = res.past_key_values
            for _ in range(max_new):
                tok = pick(res.logits[0, -1])
                out.append(tok)
                if tok in stop:
                    break
                res = model(input_ids=torch.tensor([[tok]], device=device), past_key_values=pkv, use_cache=True)
                pkv = res.past_key_values
            return out
        except Exception as e:  # pragma: no cover - depends on transformers internals
            log(f"  note: cached generation failed ({type(e).__name__}: {e}); using full re-forwards")
            gen.manual_seed(seed)
            out = []
            seq = list(ids)
            for _ in range(max_new):
                logits = model(input_ids=torch.tensor([seq], device=device), use_cache=False).logits
                tok = pick(logits[0, -1])
                out.append(tok)
                seq.append(tok)
                if tok in stop:
                    break
            return out


# ------------------------------------------------------------------------------------------------
# Self-test (no transformers / tokenizers; torch optional)
# ------------------------------------------------------------------------------------------------


def self_test(args: argparse.Namespace) -> int:
    import py_compile

    failures: list[str] = []

    def check(cond: bool, what: str) -> None:
        log(f"  {'ok  ' if cond else 'FAIL'} {what}")
        if not cond:
            failures.append(what)

    log("self-test: syntax")
    for p in sorted(HERE.glob("*.py")):
        try:
            py_compile.compile(str(p), doraise=True)
            check(True, f"py_compile {p.name}")
        except py_compile.PyCompileError as e:
            check(False, f"py_compile {p.name}: {e}")

    log("self-test: architecture")
    spec = model_spec(args.vocab_size)
    ps = check_spec(spec, smoke=False)
    log(f"  {ps['total'] / 1e6:.2f} M parameters ({ps['embedding'] / 1e6:.2f} M embedding, "
        f"{ps['ple_table'] / 1e6:.2f} M PLE table), bf16 {ps['bf16_bytes'] / 1e6:.2f} MB")
    check(ps["bf16_bytes"] <= MAX_CHECKPOINT_BYTES, "bf16 checkpoint <= 40 MB")
    geo = mrm.layer_geometry(spec)
    check([g["kv_donor"] for g in geo if g["kv_shared"]] == [5, 5, 5, 4], "KV donors: 5 (sliding), 4 (full)")
    check([g["mlp_intermediate"] for g in geo] == [640] * 6 + [1280] * 4, "double-wide MLP in shared layers")
    check_spec(model_spec(1024, smoke=True), smoke=True)
    check(lr_at(0, 1000, 1.0, 100, 0.1) == 0.01 and abs(lr_at(1000, 1000, 1.0, 100, 0.1) - 0.1) < 1e-9
          and abs(lr_at(100, 1000, 1.0, 100, 0.1) - 1.0) < 1e-9, "LR schedule warmup/cosine endpoints")

    log("self-test: tokenizer layout")
    res = dt.reserved_tokens()
    ids = {c: i for i, c, _, _ in res}
    check(ids["<pad>"] == 0 and ids["<eos>"] == 1 and ids["<bos>"] == 2 and ids["<unk>"] == 3, "pad/eos/bos/unk 0..3")
    check(ids["<|turn>"] == 105 and ids["<turn|>"] == 106 and ids["<|think|>"] == 98
          and ids["<|channel>"] == 100 and ids["<channel|>"] == 101 and ids["<|tool_call>"] == 48
          and ids['<|"|>'] == 52, "Gemma 4 special ids")
    check(ids["\n"] == 107 and ids["<0x00>"] == 138 and ids["<0xFF>"] == 393 and len(res) == dt.FIRST_LEARNED_ID,
          "newline runs 107.., bytes 138..393")
    check(len(set(ids)) == len(res), "reserved contents unique")
    # a toy "trained" BPE in the format tokenizers writes
    alphabet = [dt.SPACE, "a", "b", "c", "d", "e", "h", "t"]
    learned = alphabet + [dt.SPACE + "t", "he", dt.SPACE + "the", "ab", "abc", "cd"]
    merges = [[dt.SPACE, "t"], ["h", "e"], [dt.SPACE + "t", "he"], ["a", "b"], ["ab", "c"], ["c", "d"]]
    trained = {"model": {"type": "BPE", "vocab": {p: i for i, p in enumerate(learned)}, "merges": merges}}
    final = dt.finalize_tokenizer_json(trained, dt.FIRST_LEARNED_ID + len(learned))
    v = final["model"]["vocab"]
    check(v[dt.SPACE] == dt.FIRST_LEARNED_ID and v["cd"] == dt.FIRST_LEARNED_ID + len(learned) - 1
          and len(v) == dt.FIRST_LEARNED_ID + len(learned), "finalized vocab layout")
    check(final["model"]["byte_fallback"] is True and final["normalizer"]["content"] == dt.SPACE
          and final["decoder"]["decoders"][1]["type"] == "ByteFallback", "Gemma 3 pipeline")
    specials = {a["content"] for a in final["added_tokens"] if a["special"]}
    check(specials == set(dt.GEMMA4_SPECIALS.values()), "special flags on Gemma 4 specials only")
    check(len(final["added_tokens"]) == dt.FIRST_BYTE_ID, "added tokens: ids 0..137")
    trunc = dt.finalize_tokenizer_json(trained, dt.FIRST_LEARNED_ID + len(learned) - 1)
    check("cd" not in trunc["model"]["vocab"] and ["c", "d"] not in trunc["model"]["merges"], "truncation drops last merge")
    try:
        dt.finalize_tokenizer_json(trained, dt.FIRST_LEARNED_ID + len(learned) + 5)
        check(False, "too-small training result is refused")
    except dt.TokenizerBuildError:
        check(True, "too-small training result is refused")
    tc = dt.tokenizer_config(dd.chat_template_source(), 2048)
    check(tc["added_tokens_decoder"]["106"]["content"] == "<turn|>" and tc["bos_token"] == "<bos>", "tokenizer_config")
    check(list(dt.training_lines(["a b\n\nc\n"])) == ["a b", "c"], "training lines drop newlines")
    check(dt.strip_special_strings("<bos><|turn>user\nHi<turn|>\n") == "\n\nuser\nHi\n\n", "special strings stripped")

    log("self-test: chat template")
    try:
        import jinja2  # noqa: F401
        have_jinja = True
    except ImportError:
        have_jinja = False
        check(False, "jinja2 is importable (needed for the chat template)")
    if have_jinja:
        conv = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi\n"},
                {"role": "assistant", "content": " Hello! "}, {"role": "user", "content": "Bye"}]
        text = dd.render_chat(conv, True)
        check(text == "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\nHello!<turn|>\n"
                      "<|turn>user\nBye<turn|>\n<|turn>model\n", "render: system, trimming, generation prompt")
        segs = dd.chat_segments(conv[:3])
        check([s for s, t in segs if t] == ["Hello!<turn|>"], "segments: model turn + <turn|> is the target")
        check(dd.fast_chat_segments(conv[:3]) == segs, "fast renderer == template (system)")
        for bad, what in (([{"role": "tool", "content": "x"}], "tool role"),
                          ([{"role": "user", "content": [{"type": "image"}]}], "image part")):
            try:
                dd.render_chat(bad, True)
                check(False, f"template refuses {what}")
            except Exception as e:  # jinja2.TemplateError
                check("demo model" in str(e), f"template refuses {what}")
        real = REPO / "tests/data/templates/gemma4.jinja"
        if real.is_file():
            real_src = real.read_text()
            cases = [conv, conv[1:], [{"role": "user", "content": "x"}],
                     [{"role": "user", "content": [{"type": "text", "text": " a "}, {"type": "text", "text": "b"}]},
                      {"role": "assistant", "content": "<|channel>thought\nhm<channel|>Yes."}],
                     [{"role": "developer", "content": "Dev."}, {"role": "user", "content": "Q"},
                      {"role": "assistant", "content": "A1"}, {"role": "assistant", "content": "A2"}],
                     [{"role": "system", "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}]},
                      {"role": "user", "content": ""}]]
            for i, c in enumerate(cases):
                for gen in (True, False):
                    for think in (False, True):
                        a = dd.render_chat(c, gen, enable_thinking=think)
                        b = dd.render_chat(c, gen, template=real_src, enable_thinking=think)
                        if a != b:
                            check(False, f"case {i} gen={gen} thinking={think}: {a!r} != Gemma 4 {b!r}")
            check(not any(f.startswith("case ") for f in failures), "same text as Gemma 4's own template")

    log("self-test: corpus, split, conversations")
    corpus_dir = Path(args.corpus)
    if not (corpus_dir / "kjv.jsonl").is_file():
        log(f"  (no corpus at {corpus_dir}; building a tiny fake one)")
        corpus_dir = Path(tempfile.mkdtemp(prefix="demo-corpus-"))
        fake_corpus(corpus_dir)
    corpus = dd.load_corpus(corpus_dir)
    log(f"  corpus {corpus_dir}: {corpus.counts()}; checksums {corpus.checksums_ok}")
    check(corpus.checksums_ok in (None, True), "corpus checksums")
    docs = dd.pretrain_documents(corpus)
    train_docs, val_docs = dd.split_docs(docs, args.seed, args.val_fraction)
    frac = len(val_docs) / len(docs)
    check(0.3 * args.val_fraction < frac < 3 * args.val_fraction, f"validation fraction {frac:.4f}")
    check(not ({(d.source, d.key) for d in train_docs} & {(d.source, d.key) for d in val_docs}), "split disjoint")
    again = dd.split_docs(dd.pretrain_documents(dd.load_corpus(corpus_dir)), args.seed, args.val_fraction)[1]
    check([d.key for d in again] == [d.key for d in val_docs], "split deterministic")
    kjv = [d for d in docs if d.source == "kjv"]
    check(kjv[0].text.startswith("Genesis 1\n\n1 In the beginning"), "KJV chapter documents")
    items_t = dd.chat_items(corpus, args.seed, args.val_fraction, heldout=False)
    items_v = dd.chat_items(corpus, args.seed, args.val_fraction, heldout=True)
    convs = dd.ChatSynth(items_t, args.seed + 1).conversations(400)
    convs2 = dd.ChatSynth(dd.chat_items(corpus, args.seed, args.val_fraction, False), args.seed + 1).conversations(400)
    check(convs == convs2, "conversations deterministic")
    vconvs = dd.ChatSynth(items_v, args.seed + 2).conversations(50)
    val_answers = {m["content"] for c in vconvs for m in c if m["role"] == "assistant"}
    train_answers = {m["content"] for c in convs for m in c if m["role"] == "assistant"}
    log(f"  {len(val_answers & train_answers)} of {len(val_answers)} validation answers also occur in training "
        "(greetings and thanks are shared by design)")
    if have_jinja:
        bad = 0
        for c in convs[:200] + vconvs:
            if dd.fast_chat_segments(c) != dd.chat_segments(c):
                bad += 1
        check(bad == 0, f"fast renderer == template on 250 synthetic conversations ({bad} differ)")
        for c in convs[:3] + convs[-2:]:
            log("  ---\n" + "".join(("[[" + t + "]]") if is_t else t for t, is_t in dd.fast_chat_segments(c)))
        toy_ids, toy_mask = dd.encode_segments(dd.fast_chat_segments(convs[0]), lambda s: list(s.encode()))
        check(len(toy_ids) == len(toy_mask) and sum(toy_mask) > 0, "encode_segments")
    lens = sorted(len("".join(t for t, _ in dd.fast_chat_segments(c))) for c in convs)
    log(f"  conversation length in characters: median {lens[len(lens) // 2]}, max {lens[-1]}")
    tasks = {}
    for c in convs:
        q = c[1]["content"] if c[0]["role"] == "system" else c[0]["content"]
        tasks[q.split(" ")[0]] = tasks.get(q.split(" ")[0], 0) + 1
    log(f"  first words of first user turns: {dict(sorted(tasks.items(), key=lambda kv: -kv[1])[:12])}")

    log("self-test: batching and a training loop on a stand-in model (torch)")
    try:
        import numpy as np
        import torch
    except ImportError as e:
        log(f"  (skipped: {e})")
        np = torch = None
    if torch is not None:
        torch.manual_seed(0)
        V = 512
        ids_by_source = {"a": [[random.Random(i).randrange(4, V) for _ in range(50 + i)] for i in range(40)],
                         "b": [[7, 8, 9] * 40 for _ in range(10)]}
        data = PretrainData(np, torch, "cpu", ids_by_source, {"a": 1.0, "b": 2.0}, seq_len=32, seed=0)
        x, y = data.batch(4)
        check(tuple(x.shape) == (4, 32) and bool((x[:, 0] == dt.BOS_ID).all()) and bool((x[:, 1:] == y[:, :-1]).all()),
              "pretrain rows: <bos> first, targets shifted by one")
        data2 = PretrainData(np, torch, "cpu", ids_by_source, {"a": 1.0, "b": 2.0}, seq_len=32, seed=0)
        check(bool((data2.batch(4)[0] == x).all()), "pretrain batches deterministic")
        vr = data.fixed_rows("b", 3)
        check(vr is not None and tuple(vr[0].shape) == (3, 32), "validation rows")
        ex = [([2, 10, 11, 12, 13], [0, 0, 1, 1, 0]), ([2, 20, 21], [0, 1, 1])]
        ci, ct = collate_chat(torch, "cpu", ex)
        check(ci.shape[1] == 16 and ct[0, :4].tolist() == [-100, 11, 12, -100] and ct[1, :2].tolist() == [20, 21]
              and ci[1, 2].item() == dt.PAD_ID, "chat collate: targets only on model-turn tokens")

        class Out:
            def __init__(self, h: Any) -> None:
                self.last_hidden_state = h

        class Body(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = torch.nn.Embedding(V, 32)
                self.mix = torch.nn.Linear(32, 32)

            def forward(self, input_ids: Any, use_cache: bool = False) -> Any:
                return Out(torch.tanh(self.mix(self.emb(input_ids))))

        class Toy(torch.nn.Module):
            """Same calling convention as Gemma4ForCausalLM: .model, .lm_head, .config, __call__ -> .logits."""

            def __init__(self) -> None:
                super().__init__()
                self.model = Body()
                self.lm_head = torch.nn.Linear(32, V, bias=False)
                self.config = type("Cfg", (), {"final_logit_softcapping": 30.0})()

            def forward(self, input_ids: Any, use_cache: bool = False, past_key_values: Any = None) -> Any:
                r = type("R", (), {})()
                logits = self.lm_head(self.model(input_ids).last_hidden_state)
                r.logits = torch.tanh(logits / 30.0) * 30.0
                return r

        toy = Toy()
        val_rows = [data.fixed_rows("b", 3)]
        v0 = evaluate_rows(torch, toy, val_rows, autocast=False)[0]
        summary = train_phase("toy", torch, toy, lambda s: data.batch(8), planned_steps=60, lr=1e-2, warmup=5,
                              min_ratio=0.1, weight_decay=0.0, deadline=time.monotonic() + 60, device="cpu",
                              autocast=False, eval_fn=lambda: evaluate_rows(torch, toy, val_rows, False)[0],
                              eval_every=20, keep_best=True, log_every=20)
        v1 = evaluate_rows(torch, toy, val_rows, autocast=False)[0]
        check(v1 < v0 - 0.5 and summary["steps"] == 60, f"toy loss falls ({v0:.2f} -> {v1:.2f})")
        s2 = train_phase("toy-guard", torch, toy, lambda s: data.batch(8), planned_steps=10**6, lr=1e-3, warmup=5,
                         min_ratio=0.1, weight_decay=0.0, deadline=time.monotonic() + 1.5, device="cpu",
                         autocast=False, log_every=10**6)
        check(s2["stopped_by_wall_clock"] or s2["autoscaled_from"] is not None, "wall-clock guard / autoscale")
        out = generate(torch, toy, [2, 7, 8], 5, "cpu", sample=True, seed=3)
        out2 = generate(torch, toy, [2, 7, 8], 5, "cpu", sample=True, seed=3)
        check(out == out2 and 1 <= len(out) <= 5, "seeded sampling deterministic")

    log("")
    if failures:
        log(f"self-test: {len(failures)} FAILED")
        return 1
    log("self-test: all passed")
    return 0


def fake_corpus(root: Path) -> None:
    """A tiny corpus with the real file layout (for --self-test without the real corpus)."""
    rnd = random.Random(0)
    words = "the lord said unto moses and light was good water earth heaven day night".split()

    def sent(n: int) -> str:
        return " ".join(rnd.choice(words) for _ in range(n)).capitalize() + "."

    def write(name: str, rows: list[dict[str, Any]]) -> None:
        with open(root / name, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    verses = [{"book": "Genesis", "chapter": 1, "verse": 1, "text": "In the beginning God created the heaven and the earth."}]
    for b in ("Genesis", "Exodus", "Psalms"):
        for c in range(1, 30):
            for v in range(1, 12):
                if (b, c, v) != ("Genesis", 1, 1):
                    verses.append({"book": b, "chapter": c, "verse": v, "text": sent(14)})
    write("kjv.jsonl", verses)
    write("fortunes.jsonl", [{"category": rnd.choice(["computers", "riddles", "bofh-excuses", "wisdom"]),
                              "package": "fortunes", "text": sent(12)} for _ in range(800)])
    write("devils-dictionary.jsonl", [{"headword": f"w{i}", "text": f"W{i}, n. {sent(10)}"} for i in range(200)])
    write("jargon.jsonl", [{"headword": f"j{i}", "text": f"j{i}\n/jay/, n.\n\n1. {sent(15)}"} for i in range(200)])
    write("wordnet.jsonl", [{"lemmas": [f"word{i}"], "pos": "noun",
                             "text": f'word{i} (noun): {sent(6).rstrip(".")}; "{sent(4)}"'} for i in range(2000)])
    write("python-docs.jsonl", [{"page": f"library/m{i}", "title": f"m{i}", "text": sent(200)} for i in range(60)])
    write("python-api.jsonl", [{"name": f"m{i}.f", "kind": "function", "signature": f"m{i}.f(x)", "text": sent(9)}
                               for i in range(300)])


# ------------------------------------------------------------------------------------------------
# The real run
# ------------------------------------------------------------------------------------------------


def versions(mods: dict[str, Any]) -> dict[str, Any]:
    v = {"python": platform.python_version()}
    for name, m in mods.items():
        v[name] = getattr(m, "__version__", "?")
    torch = mods.get("torch")
    if torch is not None:
        v["cuda"] = getattr(torch.version, "cuda", None)
        if torch.cuda.is_available():
            v["gpu"] = torch.cuda.get_device_name(0)
    return v


def check_initial_weights(torch: Any, model: Any) -> None:
    """Gemma 4's RMSNorm multiplies by its weight (not 1 + weight): every norm weight and layer scalar
    must start at 1. Fixes and reports anything else (a transformers init change would otherwise
    silently start training from zeroed norms)."""
    fixed = []
    with torch.no_grad():
        for name, mod in model.named_modules():
            w = getattr(mod, "weight", None)
            if type(mod).__name__.endswith("RMSNorm") and isinstance(w, torch.nn.Parameter):
                if not bool((w == 1).all()):
                    w.fill_(1.0)
                    fixed.append(name)
            ls = getattr(mod, "layer_scalar", None)
            if ls is not None and not bool((ls == 1).all()):
                ls.fill_(1.0)
                fixed.append(name + ".layer_scalar")
    if fixed:
        mrm.warn(f"reset to 1 after construction: {fixed[:6]}{' ...' if len(fixed) > 6 else ''}")


def set_attention(model: Any, impl: str) -> str:
    try:
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(impl)
        else:
            model.config._attn_implementation = impl
    except Exception as e:
        mrm.warn(f"attention implementation {impl!r} not available ({e}); using eager")
        mrm.force_eager(model, "training model")
        return "eager"
    return impl


def run(args: argparse.Namespace) -> int:
    clock = Clock(args.max_minutes)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    random.seed(args.seed)
    mrm.import_deps()
    torch = mrm._MODS["torch"]
    transformers = mrm._MODS["transformers"]
    st = mrm._MODS["st"]
    try:
        import numpy as np
        import tokenizers
    except ImportError as e:
        die(f"missing package: {e}")
    mods = {"torch": torch, "transformers": transformers, "tokenizers": tokenizers, "numpy": np}
    try:
        import safetensors
        mods["safetensors"] = safetensors
    except ImportError:
        pass
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        die("CUDA requested but not available")
    if device == "cpu" and not args.smoke:
        mrm.warn("training on the CPU: this will be very slow; use --smoke for a pipeline check")
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if device.startswith("cuda"):
        torch.cuda.manual_seed_all(args.seed)
    if not args.no_deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    autocast = True
    report: dict[str, Any] = {"command": " ".join([sys.executable] + sys.argv), "seed": args.seed,
                              "smoke": args.smoke, "settings": {k: v for k, v in vars(args).items()},
                              "versions": versions(mods), "device": device}
    log(f"versions: {report['versions']}, device {device}")

    out = Path(args.out)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        status = _run_stages(args, clock, torch, transformers, st, np, tokenizers, device, autocast, report, tmp)
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(out)
        log(f"\nwrote {out} in {clock.elapsed():.0f} s")
        for p in sorted(out.iterdir()):
            log(f"  {p.name:28s} {p.stat().st_size / 1e6:8.2f} MB")
        if args.bundle_dir:
            bundle(out, Path(args.bundle_dir))
        return status
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def bundle(out: Path, bundle_dir: Path, part_bytes: int = 15 * 1024 * 1024) -> None:
    """OUT as OUTNAME.tar.00, .01, ... (each <= part_bytes) and OUTNAME.tar.sha256 in bundle_dir.
    Restore with: cat OUTNAME.tar.?? | tar -xf - -C PARENT   (check: cat OUTNAME.tar.?? | sha256sum)."""
    import tarfile

    bundle_dir.mkdir(parents=True, exist_ok=True)
    tar_path = bundle_dir / f"{out.name}.tar"
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tf:
        for p in sorted(out.iterdir()):
            tf.add(p, arcname=f"{out.name}/{p.name}")
    digest = hashlib.sha256()
    with open(tar_path, "rb") as f:
        i = 0
        while True:
            chunk = f.read(part_bytes)
            if not chunk:
                break
            digest.update(chunk)
            (bundle_dir / f"{out.name}.tar.{i:02d}").write_bytes(chunk)
            i += 1
    tar_path.unlink()
    (bundle_dir / f"{out.name}.tar.sha256").write_text(f"{digest.hexdigest()}  {out.name}.tar\n")
    log(f"bundle: {i} parts in {bundle_dir}; restore with: cat {out.name}.tar.?? | tar -xf - -C <parent>")


def _run_stages(args: argparse.Namespace, clock: Clock, torch: Any, transformers: Any, st: Any, np: Any,
                tokenizers: Any, device: str, autocast: bool, report: dict[str, Any], tmp: Path) -> int:
    # ---- corpus and split
    t = time.monotonic()
    corpus = dd.load_corpus(args.corpus)
    if corpus.checksums_ok is False:
        die(f"{args.corpus}/SHA256SUMS does not match the files; rerun scripts/fetch_demo_corpus.sh")
    docs = dd.pretrain_documents(corpus)
    if args.smoke:
        docs = [d for i, d in enumerate(docs) if i % 10 == 0]
    train_docs, val_docs = dd.split_docs(docs, args.seed, args.val_fraction)
    report["corpus"] = {"path": str(args.corpus), "records": corpus.counts(),
                        "sha256sums_sha256": hashlib.sha256(corpus.sha256sums.encode()).hexdigest(),
                        "documents": {"train": len(train_docs), "validation": len(val_docs)},
                        "train_chars": sum(len(d.text) for d in train_docs)}
    log(f"corpus: {corpus.counts()}; {len(train_docs)} training / {len(val_docs)} validation documents")
    clock.mark("corpus_s", t)

    # ---- conversations (text only; tokenized after the tokenizer is trained)
    t = time.monotonic()
    n_train_conv = min(24000, max(200, args.finetune_steps * args.finetune_batch_size))
    items_t = dd.chat_items(corpus, args.seed, args.val_fraction, heldout=False)
    items_v = dd.chat_items(corpus, args.seed, args.val_fraction, heldout=True)
    convs = dd.ChatSynth(items_t, args.seed + 1).conversations(n_train_conv)
    vconvs = dd.ChatSynth(items_v, args.seed + 2).conversations(args.val_conversations)
    for c in convs[:300] + vconvs[:100]:
        if dd.fast_chat_segments(c) != dd.chat_segments(c):
            die(f"fast renderer disagrees with the chat template on {c!r:.300}")

    # ---- tokenizer
    t = time.monotonic()
    chat_texts = [dt.strip_special_strings("".join(seg for seg, _ in dd.fast_chat_segments(c))) for c in convs[:4000]]
    runtime_tok, train_tok, tok_json = dt.train_tokenizer(list(dd.iter_texts(train_docs)) + chat_texts,
                                                          args.vocab_size)
    problems = dt.check_tokenizer(runtime_tok, args.vocab_size)
    if problems:
        die("tokenizer checks failed:\n  " + "\n  ".join(problems))
    sample_lines = [line for d in train_docs[::max(1, len(train_docs) // 400)] for line in d.text.split("\n")[:5]]
    n_diff, diffs = dt.check_runtime_matches_training(runtime_tok, train_tok, sample_lines)
    if n_diff:
        mrm.warn(f"{n_diff} sample lines segment differently at run time than in training: {diffs}")
    clock.mark("tokenizer_s", t)
    log(f"tokenizer: {args.vocab_size} ids, {len(tok_json['model']['merges'])} merges, "
        f"{clock.marks['tokenizer_s']} s; runtime==training segmentation on {len(sample_lines) - n_diff}/"
        f"{len(sample_lines)} lines")

    def encode_many(texts: list[str]) -> list[list[int]]:
        out = []
        for i in range(0, len(texts), 4096):
            out += [e.ids for e in runtime_tok.encode_batch(texts[i:i + 4096], add_special_tokens=False)]
        return out

    # ---- token streams
    t = time.monotonic()
    train_ids: dict[str, list[list[int]]] = {}
    val_ids: dict[str, list[list[int]]] = {}
    for split_docs_, target in ((train_docs, train_ids), (val_docs, val_ids)):
        enc = encode_many([d.text for d in split_docs_])
        for d, ids in zip(split_docs_, enc):
            target.setdefault(d.source, []).append(ids)
    train_chars = sum(len(d.text) for d in train_docs)
    train_tokens = sum(len(x) for v in train_ids.values() for x in v)
    weights = dict(dd.PRETRAIN_WEIGHTS)
    pre = PretrainData(np, torch, device, train_ids, weights, args.seq_len, args.seed)
    pre_val = PretrainData(np, torch, device, val_ids, weights, args.seq_len, args.seed + 1)
    val_rows = {s: pre_val.fixed_rows(s, args.val_rows_per_source) for s in pre_val.sources}
    val_rows = {s: r for s, r in val_rows.items() if r is not None}
    if not val_rows:
        die("no validation rows (validation split too small)")
    report["tokens"] = {"train": train_tokens, "chars_per_token": round(train_chars / max(train_tokens, 1), 3),
                        "train_by_source": pre.tokens, "weighted_epoch_tokens": int(pre.weighted_tokens),
                        "validation_rows": {s: int(r[0].shape[0]) for s, r in val_rows.items()}}
    log(f"tokens: {train_tokens} training ({train_chars / max(train_tokens, 1):.2f} chars/token), by source "
        f"{pre.tokens}; validation rows {report['tokens']['validation_rows']}")
    clock.mark("encode_s", t)

    def encode_convs(cs: list[list[dict[str, str]]]) -> list[tuple[list[int], list[int]]]:
        segs = [dd.fast_chat_segments(c) for c in cs]
        flat = [s for sg in segs for s, _ in sg]
        enc = encode_many(flat)
        out, k = [], 0
        for sg in segs:
            ids, mask = [], []
            for _, is_t in sg:
                ids += enc[k]
                mask += [1 if is_t else 0] * len(enc[k])
                k += 1
            if len(ids) <= args.finetune_seq_len:
                out.append((ids, mask))
        return out

    t = time.monotonic()
    chat_train = encode_convs(convs)
    chat_val = encode_convs(vconvs)
    for c in convs[:50]:
        whole = runtime_tok.encode("".join(s for s, _ in dd.fast_chat_segments(c)), add_special_tokens=False).ids
        by_segments = encode_convs([c])
        if not by_segments:  # longer than finetune_seq_len: dropped, nothing to compare
            continue
        if whole != by_segments[0][0]:
            die("tokenizing a conversation by segments differs from tokenizing it whole")
    if len(chat_train) < args.finetune_batch_size or not chat_val:
        die(f"too few conversations fit {args.finetune_seq_len} tokens")
    val_chat_rows = [collate_chat(torch, device, chat_val[i:i + 16]) for i in range(0, len(chat_val), 16)]
    report["conversations"] = {"train": len(chat_train), "validation": len(chat_val),
                               "dropped_too_long": len(convs) + len(vconvs) - len(chat_train) - len(chat_val),
                               "example": convs[0]}
    log(f"conversations: {len(chat_train)} training, {len(chat_val)} validation")
    clock.mark("conversations_s", t)

    # ---- model
    t = time.monotonic()
    spec = model_spec(args.vocab_size, smoke=args.smoke)
    ps = check_spec(spec, smoke=args.smoke)
    torch.manual_seed(args.seed)
    try:
        config = mrm._MODS["Gemma4TextConfig"](**spec)
    except Exception as e:
        die(f"Gemma4TextConfig rejected the spec: {type(e).__name__}: {e}")
    model = mrm._MODS["Gemma4ForCausalLM"](config).float()
    cfgd = mrm.config_to_dict(model.config)
    mrm.check_config(spec, cfgd)
    geo = mrm.layer_geometry(spec)
    mrm.compare_geometry(geo, mrm.layer_geometry(cfgd), spec["num_attention_heads"], "config vs spec")
    mrm.compare_geometry(geo, mrm.geometry_from_model(model), spec["num_attention_heads"], "modules vs spec")
    n_params = sum(p.numel() for p in model.parameters())
    if n_params != ps["total"] - sum(math.prod(s) for k, s in mrm.expected_state_dict_shapes(spec).items()
                                     if k.endswith("layer_scalar")):
        die(f"model has {n_params} parameters, the spec says {ps['total']} (incl. layer scalars)")
    check_initial_weights(torch, model)
    attn = set_attention(model, "sdpa")
    model.to(device)
    train_model = model
    if args.compile:
        try:
            model.__dict__["_lmx_body"] = torch.compile(model.model)
        except Exception as e:
            mrm.warn(f"torch.compile failed ({e}); training eagerly")
    report["model"] = {"parameters": ps, "config": {k: spec[k] for k in spec if k != "rope_parameters"},
                       "rope_parameters": spec["rope_parameters"], "training_attention": attn,
                       "layers": geo}
    log(f"model: {ps['total'] / 1e6:.2f} M parameters ({ps['embedding'] / 1e6:.2f} M embedding, "
        f"{ps['ple_table'] / 1e6:.2f} M PLE table, {ps['other'] / 1e6:.2f} M other); bf16 "
        f"{ps['bf16_bytes'] / 1e6:.2f} MB; attention {attn}")
    clock.mark("model_s", t)

    def val_text() -> float:
        return evaluate_rows(torch, model, list(val_rows.values()), autocast)[0]

    def val_report() -> dict[str, Any]:
        by_source = {s: round(evaluate_rows(torch, model, [r], autocast)[0], 4) for s, r in val_rows.items()}
        text_loss, n_text = evaluate_rows(torch, model, list(val_rows.values()), autocast)
        chat_loss, n_chat = evaluate_rows(torch, model, val_chat_rows, autocast)
        return {"text_loss": round(text_loss, 4), "text_ppl": round(math.exp(text_loss), 3), "text_tokens": n_text,
                "chat_loss": round(chat_loss, 4), "chat_ppl": round(math.exp(chat_loss), 3), "chat_tokens": n_chat,
                "text_loss_by_source": by_source}

    # ---- time plan
    train_time = clock.remaining() - args.reserve_seconds
    if train_time < 30:
        die(f"only {train_time:.0f} s left for training; raise --max-minutes")
    pretrain_deadline = time.monotonic() + 0.85 * train_time
    tokens_per_step = args.batch_size * args.seq_len
    planned = math.ceil(args.pretrain_epochs * pre.weighted_tokens / tokens_per_step)
    if args.pretrain_steps:
        planned = min(planned, args.pretrain_steps)
    log(f"\npretraining: plan {planned} steps of {tokens_per_step} tokens ({args.pretrain_epochs} weighted epochs),"
        f" {0.85 * train_time:.0f} s available")
    report["validation_initial"] = {"text_loss": round(val_text(), 4)}
    pre_summary = train_phase(
        "pretrain", torch, train_model, lambda s: pre.batch(args.batch_size), planned_steps=planned, lr=args.lr,
        warmup=args.warmup_steps, min_ratio=args.min_lr_ratio, weight_decay=args.weight_decay,
        deadline=pretrain_deadline, device=device, autocast=autocast, eval_fn=val_text,
        eval_every=args.eval_every, keep_best=not args.no_keep_best)
    report["pretrain"] = pre_summary
    report["validation_after_pretrain"] = val_report()
    log(f"after pretraining: {report['validation_after_pretrain']}")

    # ---- finetune
    chat_iter = chat_batches(np, torch, device, chat_train, args.finetune_batch_size, args.seed + 3)
    mix = args.finetune_mix_every

    def ft_batch(step: int) -> tuple[Any, Any]:
        if mix and step % mix == mix - 1:
            return pre.batch(max(1, args.finetune_batch_size // 2))
        return next(chat_iter)

    ft_deadline = clock.deadline - args.reserve_seconds
    log(f"\nfinetuning: {args.finetune_steps} steps, {max(0.0, ft_deadline - time.monotonic()):.0f} s available")
    ft_summary = train_phase(
        "finetune", torch, train_model, ft_batch, planned_steps=args.finetune_steps, lr=args.finetune_lr,
        warmup=max(1, args.finetune_steps // 20), min_ratio=0.1, weight_decay=args.weight_decay,
        deadline=ft_deadline, device=device, autocast=autocast,
        eval_fn=lambda: evaluate_rows(torch, model, val_chat_rows, autocast)[0],
        eval_every=max(1, args.finetune_steps // 3), keep_best=False, log_every=50)
    report["finetune"] = ft_summary
    report["validation_after_finetune"] = val_report()
    log(f"after finetuning: {report['validation_after_finetune']}")

    # ---- samples (the trained model, float32)
    t = time.monotonic()
    model.eval()
    samples = []
    for i, msgs in enumerate(dd.SAMPLE_CHATS):
        ids = runtime_tok.encode(dd.render_chat(msgs, True), add_special_tokens=False).ids
        g = generate(torch, model, ids, 96, device, sample=False)
        s = generate(torch, model, ids, 96, device, sample=True, seed=args.seed + i)
        entry = {"messages": msgs, "greedy": runtime_tok.decode(g, skip_special_tokens=True),
                 "sampled": runtime_tok.decode(s, skip_special_tokens=True),
                 "greedy_ended_turn": bool(g and g[-1] == dt.TURN_CLOSE_ID)}
        samples.append(entry)
        log(f"\n> {msgs[-1]['content']}\n  greedy:  {entry['greedy']!r}\n  sampled: {entry['sampled']!r}")
    for i, text in enumerate(dd.SAMPLE_TEXTS):
        ids = runtime_tok.encode(text, add_special_tokens=True).ids
        g = generate(torch, model, ids, 64, device, sample=False, stop=(dt.EOS_ID,))
        s = generate(torch, model, ids, 64, device, sample=True, seed=args.seed + 100 + i, stop=(dt.EOS_ID,))
        entry = {"text": text, "greedy": runtime_tok.decode(g, skip_special_tokens=True),
                 "sampled": runtime_tok.decode(s, skip_special_tokens=True)}
        samples.append(entry)
        log(f"\n> {text}\n  greedy:  {entry['greedy']!r}\n  sampled: {entry['sampled']!r}")
    report["samples"] = samples
    clock.mark("samples_s", t)

    # ---- export
    t = time.monotonic()
    model.to("cpu").float()
    with torch.no_grad():
        for _, mod in model.named_modules():
            nonpersistent = getattr(mod, "_non_persistent_buffers_set", set())
            for _, p in mod.named_parameters(recurse=False):
                p.data.copy_(p.data.to(torch.bfloat16).to(p.dtype))
            for bn, b in mod.named_buffers(recurse=False):
                if bn not in nonpersistent and b.is_floating_point():
                    b.data.copy_(b.data.to(torch.bfloat16).to(b.dtype))
    sd = mrm.export_state_dict(model, cfgd)
    mrm.check_shapes(sd, spec, "exported state_dict vs spec")
    bf16 = {k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}
    st.save_file(bf16, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    size = (tmp / "model.safetensors").stat().st_size
    if not args.smoke and size > MAX_CHECKPOINT_BYTES:
        die(f"model.safetensors is {size / 1e6:.2f} MB (> 40 MB)")
    with tempfile.TemporaryDirectory() as hf_dir:
        model.save_pretrained(hf_dir)
        hf_keys: dict[str, tuple[int, ...]] = {}
        for f in sorted(Path(hf_dir).glob("*.safetensors")):
            for k, v in st.load_file(str(f)).items():
                hf_keys[k] = tuple(v.shape)
    ours = {k: tuple(v.shape) for k, v in sd.items()}
    if hf_keys != ours:
        die(f"save_pretrained writes other tensors: only HF {sorted(set(hf_keys) - set(ours))}, "
            f"only ours {sorted(set(ours) - set(hf_keys))}")
    cfg_out = mrm.config_to_dict(model.config)
    for k in [k for k in cfg_out if k.startswith("_") and k != "_name_or_path"]:
        cfg_out.pop(k)
    cfg_out["architectures"] = ["Gemma4ForCausalLM"]
    cfg_out["dtype"] = "bfloat16"
    cfg_out.pop("torch_dtype", None)
    cfg_out["use_cache"] = True
    (tmp / "config.json").write_text(json.dumps(mrm.to_jsonable(cfg_out), indent=2, sort_keys=True) + "\n")
    mrm.compare_geometry(geo, mrm.layer_geometry(cfg_out), spec["num_attention_heads"], "config.json vs spec")
    gen_cfg = mrm._MODS["GenerationConfig"](bos_token_id=dt.BOS_ID, eos_token_id=[dt.EOS_ID, dt.TURN_CLOSE_ID],
                                            pad_token_id=dt.PAD_ID, do_sample=True, temperature=0.8, top_p=0.95,
                                            top_k=64)
    gen_cfg.save_pretrained(str(tmp))
    template = dd.chat_template_source()
    (tmp / "tokenizer.json").write_text(json.dumps(tok_json, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (tmp / "tokenizer_config.json").write_text(
        json.dumps(dt.tokenizer_config(template, spec["max_position_embeddings"]), ensure_ascii=False, indent=2) + "\n",
        encoding="utf-8")
    (tmp / "special_tokens_map.json").write_text(json.dumps(dt.special_tokens_map(), indent=2) + "\n")
    (tmp / "chat_template.jinja").write_text(template, encoding="utf-8")
    report["hf_tokenizer_check"] = hf_tokenizer_check(transformers, tmp, runtime_tok)
    clock.mark("export_s", t)

    # ---- goldens (float32, eager, TF32 off, from the written files)
    t = time.monotonic()
    numerics = mrm.setup_numerics(device)
    gold = write_goldens(torch, st, tmp, device, runtime_tok, cfg_out, numerics)
    report["goldens"] = gold
    clock.mark("goldens_s", t)

    report["wall_seconds"] = round(clock.elapsed(), 1)
    report["stage_seconds"] = clock.marks
    report["files"] = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
                       for p in sorted(tmp.iterdir()) if p.is_file()}
    (tmp / "train_report.json").write_text(json.dumps(mrm.to_jsonable(report), indent=2, ensure_ascii=False) + "\n",
                                           encoding="utf-8")
    log(f"\nvalidation: before finetune {report['validation_after_pretrain']['text_ppl']} text ppl / "
        f"{report['validation_after_pretrain']['chat_ppl']} chat ppl; after finetune "
        f"{report['validation_after_finetune']['text_ppl']} / {report['validation_after_finetune']['chat_ppl']}")
    if gold["failures"]:
        log("\n" + "!" * 90 + "\nCROSS-CHECK FAILURES:\n  " + "\n  ".join(gold["failures"]) + "\n" + "!" * 90)
        return 2
    return 0


def hf_tokenizer_check(transformers: Any, model_dir: Path, runtime_tok: Any) -> dict[str, Any]:
    """transformers' AutoTokenizer on the written files: same ids and same chat text (warnings only)."""
    result: dict[str, Any] = {}
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
        texts = ["In the beginning God created the heaven and the earth.", "  spaces  and\ttabs\n\nnew lines",
                 "naïve café 🙂 1611"]
        same = all(tok(t, add_special_tokens=False)["input_ids"] == runtime_tok.encode(t, add_special_tokens=False).ids
                   for t in texts)
        result["encode_matches"] = same
        result["bos_added"] = tok("Hi")["input_ids"][:1] == [dt.BOS_ID]
        msgs = dd.GOLDEN_CHATS[1]
        hf_text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        result["chat_template_matches"] = hf_text == dd.render_chat(msgs, True)
        result["class"] = type(tok).__name__
        if not (same and result["bos_added"] and result["chat_template_matches"]):
            mrm.warn(f"transformers' tokenizer disagrees with the tokenizers one: {result}")
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
        mrm.warn(f"AutoTokenizer check failed: {result['error']}")
    return result


def write_goldens(torch: Any, st: Any, model_dir: Path, device: str, runtime_tok: Any, cfgd: dict[str, Any],
                  numerics: dict[str, Any]) -> dict[str, Any]:
    model = mrm.load_model_dir(model_dir, device)
    ckpt = {k: v.float() for k, v in st.load_file(str(model_dir / "model.safetensors")).items()}
    sd_now = model.state_dict()
    for k, v in ckpt.items():
        if not torch.equal(sd_now[k].detach().cpu(), v):
            die(f"reloaded tensor {k} differs from model.safetensors")
    tensors: dict[str, Any] = {}
    per_prompt, failures = [], []
    for i, msgs in enumerate(dd.GOLDEN_CHATS):
        text = dd.render_chat(msgs, True)
        ids = runtime_tok.encode(text, add_special_tokens=False).ids
        logits = mrm.forward_logits(model, ids, device).cpu()
        if not torch.isfinite(logits).all():
            die(f"golden prompt {i}: non-finite logits")
        toks, g_rows, margins = mrm.greedy_nocache(model, ids, device)
        tensors[f"prompt_{i}"] = torch.tensor(ids, dtype=torch.int32)
        tensors[f"logits_{i}"] = logits.contiguous()
        tensors[f"greedy_{i}"] = torch.tensor(toks, dtype=torch.int32)
        tensors[f"greedy_logits_{i}"] = g_rows.contiguous()
        entry: dict[str, Any] = {"messages": msgs, "text": text, "ids": ids, "length": len(ids), "greedy": toks,
                                 "greedy_text": runtime_tok.decode(toks, skip_special_tokens=False),
                                 "greedy_min_margin": min(margins), "logits_std": float(logits.std()),
                                 "logits_max_abs": float(logits.abs().max())}
        if min(margins) < 1e-3:
            mrm.warn(f"golden prompt {i}: greedy top-1/top-2 margin {min(margins):.2e} is tiny")
        try:
            c_toks, c_rows = mrm.greedy_cached(model, ids, device)
            entry["cached_greedy_equal"] = c_toks == toks
            if c_toks != toks:
                mrm.warn(f"golden prompt {i}: cached greedy {c_toks} != no-cache greedy {toks}")
            else:
                entry["cached_step_logits_max_abs_diff"] = float((c_rows - g_rows).abs().max())
        except Exception as e:
            entry["cached_greedy_error"] = f"{type(e).__name__}: {e}"
            mrm.warn(f"golden prompt {i}: cached greedy failed: {entry['cached_greedy_error']}")
        ref = mrm.reference_forward(ckpt, cfgd, ids)
        diff = float((ref - logits.to(torch.float64)).abs().max())
        tol = mrm.REF_TOL * (1.0 + float(logits.abs().max()))
        entry["reference_max_abs_diff"] = diff
        if diff > tol:
            failures.append(f"prompt {i}: float64 reference forward differs from transformers by {diff:.3g} > {tol:.3g}")
        per_prompt.append(entry)
        log(f"golden {i}: {len(ids)} tokens, greedy {entry['greedy_text']!r}, ref diff {diff:.2e}, "
            f"min margin {min(margins):.3f}")
    st.save_file({k: v.contiguous() for k, v in tensors.items()}, str(model_dir / "goldens.safetensors"),
                 metadata={"format": "pt"})
    meta = {
        "model": "lmx demo model",
        "compute_dtype": "float32", "attn_implementation": "eager", "numerics": numerics,
        "model_safetensors_sha256": sha256_file(model_dir / "model.safetensors"),
        "greedy_steps": mrm.GREEDY_STEPS,
        "prompt_rule": "chat_template.jinja rendered with add_generation_prompt=true, tokenized without "
                       "adding special tokens (the template writes <bos>)",
        "greedy_rule": "argmax (lowest index on ties) of the last-position logits of a full no-cache forward "
                       "over prompt+generated; EOS/<turn|> not special; greedy_logits_i[k] produced greedy_i[k]",
        "tensors": {"prompt_i": "int32 [T]", "logits_i": "float32 [T, V]", "greedy_i": f"int32 [{mrm.GREEDY_STEPS}]",
                    "greedy_logits_i": f"float32 [{mrm.GREEDY_STEPS}, V]"},
        "per_prompt": per_prompt,
        "failures": failures,
    }
    (model_dir / "goldens.json").write_text(json.dumps(mrm.to_jsonable(meta), indent=2, ensure_ascii=False) + "\n",
                                            encoding="utf-8")
    return {"per_prompt": [{k: v for k, v in p.items() if k not in ("messages", "text")} for p in per_prompt],
            "failures": failures}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.self_test:
        try:
            return self_test(args)
        except (mrm.FatalError, dd.DataError, dt.TokenizerBuildError) as e:
            log(f"self-test FATAL: {e}")
            return 1
    try:
        return run(args)
    except (mrm.FatalError, dd.DataError, dt.TokenizerBuildError) as e:
        log(f"\nFATAL: {e}")
        return 1
    except Exception as e:
        traceback.print_exc()
        log(f"\nFATAL: unexpected {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
