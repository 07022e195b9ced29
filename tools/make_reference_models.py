#!/usr/bin/env python3
"""Create tiny random Gemma 4 text models and golden outputs for lmx tests.

Run on a machine with torch (2.11) and transformers (5.17):

    python3 tools/make_reference_models.py --out tests/data/models

For every model NAME this writes OUT/NAME/:

    config.json             full Gemma4TextConfig dict as transformers serialises it (use_diff=False)
    generation_config.json
    model.safetensors       weights in bf16, HF text-export names (model.layers..., no lm_head when tied)
    goldens.safetensors     prompt_{i} int32 [T], logits_{i} f32 [T,V], greedy_{i} int32 [20],
                            greedy_logits_{i} f32 [20,V] (logits that produced each greedy token)
    goldens.json            metadata, per-prompt stats, cross-check results

Goldens are computed in float32 (TF32 off, eager attention, eager experts) from a model that is
loaded back from model.safetensors, so they match the stored bf16 weights exactly.

Checks (all loud): config keys really used, per-layer geometry vs spec vs config.json vs modules,
state_dict names/shapes vs the expected list, every parameter/persistent buffer perturbed,
save_pretrained key set == our export, reload == in-memory model, RoPE inv_freq vs formula,
and an independent float64 re-implementation of the forward (the spec in
docs/gemma4-transformers-notes.md) vs transformers.

`--print-expected-keys` needs neither torch nor transformers: it prints the expected
state_dict of every model from the specs alone.

Exit status: 0 ok; 1 fatal error (nothing trustworthy written for that model); 2 everything
written but a cross-check disagreed (see the banner).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------

GREEDY_STEPS = 20
PROMPT_LENGTHS = (1, 7, 16, 33, 64)
PROMPT_SEED = 20260417
BOS_ID = 2
FIRST_RANDOM_TOKEN = 3
MAX_MODEL_DIR_BYTES = int(3.5 * 1024 * 1024)

SLIDING = "sliding_attention"
FULL = "full_attention"

# Perturbation scales (chosen so activations stay O(1) and logits are O(1-10)).
# Embedding std 1/sqrt(H): h0 = E*sqrt(H) has rms ~1, so the ~3L post-normed block outputs (rms ~1 each)
# dominate the final residual and the tied head does not just echo the input token. The final norm
# weight gets an extra gain so the logits (tied head, std ~ rms(norm.weight)) are O(3) rather than O(1).
EMBED_STD_X_SQRT_H = 1.0      # main embedding std = 1/sqrt(H)
PLE_EMBED_STD_X_SQRT_P = 1.0  # PLE table std = 1/sqrt(P) -> tok = E_ple*sqrt(P) has rms ~1
FINAL_NORM_GAIN = 3.0         # model.norm.weight = 3 * (1 + 0.3*randn)
NORM_JITTER = 0.3             # RMSNorm weights = 1 + 0.3*randn
# Attention has scale 1.0 on RMS-normalised q/k, so raw scores have std ~sqrt(head_dim): very sharp softmax
# that amplifies rounding (f32 RoPE angles alone move logits by ~3e-4). q_norm gets gain 0.5 to soften it,
# which keeps goldens less precision-sensitive for lower-precision engines.
Q_NORM_GAIN = 0.5             # self_attn.q_norm.weight = 0.5 * (1 + 0.3*randn)
ROUTER_PROJ_GAIN = 2.0   # router logits std ~2 => clear top-k decisions
LAYER_SCALAR_RANGE = (0.5, 1.5)
# float64 re-implementation vs transformers f32: rounding differences are ~1e-4..1e-3 on logits of O(10);
# semantic mistakes (mask off by one, wrong norm, wrong donor) give O(1).
REF_TOL = 2e-3
PER_EXPERT_SCALE_RANGE = (0.5, 1.5)

# Gemma4TextConfig class defaults (transformers 5.15+; used when a key is absent).
CONFIG_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262144,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 30,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "sliding_window": 512,
    "final_logit_softcapping": None,
    "vocab_size_per_layer_input": 262144,
    "hidden_size_per_layer_input": 256,
    "attention_k_eq_v": False,
    "num_kv_shared_layers": 0,
    "enable_moe_block": False,
    "use_double_wide_mlp": False,
    "num_experts": None,
    "top_k_experts": None,
    "moe_intermediate_size": None,
    "global_head_dim": 512,
    "num_global_key_value_heads": None,
}

DEFAULT_ROPE = {
    SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
    FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}

# Keys passed to Gemma4TextConfig that 5.15+ converts into `per_layer_config` (not stored as-is).
CONVERTED_KEYS = ("global_head_dim", "num_global_key_value_heads")


class FatalError(RuntimeError):
    pass


def die(msg: str) -> None:
    raise FatalError(msg)


def warn(msg: str) -> None:
    print(f"WARNING: {msg}", flush=True)


def log(msg: str = "") -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------------------------
# Model specs
# --------------------------------------------------------------------------------------------

S, F = SLIDING, FULL


def _common(**kw: Any) -> dict[str, Any]:
    base = {
        "vocab_size": 512,
        "hidden_size": 64,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_cache": True,
        "rope_parameters": json.loads(json.dumps(DEFAULT_ROPE)),
    }
    base.update(kw)
    base["num_hidden_layers"] = len(base["layer_types"])
    return base


SPECS: dict[str, dict[str, Any]] = {
    # E2B-like: PLE, KV sharing (2 donors: layer 5 sliding, layer 4 full; shared 6,7,8 sliding +
    # 9 full), double-wide MLP in the shared layers, 1 KV head, 4:1 pattern, proportional RoPE.
    "tiny-e2b": {
        "seed": 1,
        "description": "E2B-like: PLE, KV sharing (sliding+full), double-wide MLP, MQA, softcap 30",
        "config": _common(
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=32,
            global_head_dim=64,
            layer_types=[S, S, S, S, F, S, S, S, S, F],
            sliding_window=8,
            hidden_size_per_layer_input=16,
            vocab_size_per_layer_input=512,
            num_kv_shared_layers=4,
            use_double_wide_mlp=True,
            attention_k_eq_v=False,
            enable_moe_block=False,
            final_logit_softcapping=30.0,
        ),
    },
    # 26B-A4B-like: MoE in every layer (+ dense MLP), k_eq_v on full layers,
    # sliding KV heads 2 vs global KV heads 1, no PLE.
    "tiny-26b-moe": {
        "seed": 2,
        "description": "26B-A4B-like: MoE 8 experts top-2, attention_k_eq_v, kv 2 (sliding) / 1 (full)",
        "config": _common(
            intermediate_size=96,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            global_head_dim=64,
            num_global_key_value_heads=1,
            layer_types=[S, S, F, S, S, F],
            sliding_window=12,
            hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=512,
            num_kv_shared_layers=0,
            use_double_wide_mlp=False,
            attention_k_eq_v=True,
            enable_moe_block=True,
            num_experts=8,
            top_k_experts=2,
            moe_intermediate_size=32,
            final_logit_softcapping=30.0,
        ),
    },
    # 31B-like: dense, k_eq_v, kv 4 (sliding) / 2 (full), no softcapping, 5:1 pattern.
    "tiny-31b": {
        "seed": 3,
        "description": "31B-like: dense, attention_k_eq_v, kv 4 (sliding) / 2 (full), no softcap",
        "config": _common(
            intermediate_size=192,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=32,
            global_head_dim=64,
            num_global_key_value_heads=2,
            layer_types=[S, S, S, S, S, F],
            sliding_window=16,
            hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=512,
            num_kv_shared_layers=0,
            use_double_wide_mlp=False,
            attention_k_eq_v=True,
            enable_moe_block=False,
            final_logit_softcapping=None,
        ),
    },
}


# --------------------------------------------------------------------------------------------
# Torch-free model description (the rules of docs/gemma4-transformers-notes.md)
# --------------------------------------------------------------------------------------------


def cfg_get(cfg: dict[str, Any], key: str) -> Any:
    if key in cfg:
        return cfg[key]
    if key in CONFIG_DEFAULTS:
        return CONFIG_DEFAULTS[key]
    die(f"config key {key!r} missing and has no known default")


def resolved_layer_types(cfg: dict[str, Any]) -> list[str]:
    L = int(cfg_get(cfg, "num_hidden_layers"))
    lt = cfg.get("layer_types")
    if lt is None:
        lt = [SLIDING if (i + 1) % 6 else FULL for i in range(L)]
    lt = list(lt)
    if len(lt) != L:
        die(f"layer_types has {len(lt)} entries, num_hidden_layers is {L}")
    for t in lt:
        if t not in (SLIDING, FULL):
            die(f"unknown layer type {t!r}")
    if lt[-1] != FULL:
        warn("last layer is not full_attention; transformers forces it to full_attention")
        lt[-1] = FULL
    return lt


def layer_geometry(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-layer geometry from a config dict (5.15+ `per_layer_config` or legacy keys)."""
    if cfg.get("use_bidirectional_attention") == "all":
        die("use_bidirectional_attention='all' is not a causal LM; unsupported")
    if cfg_get(cfg, "attention_bias"):
        die("attention_bias=True is not supported by this tool")
    L = int(cfg_get(cfg, "num_hidden_layers"))
    types = resolved_layer_types(cfg)
    head_dim = int(cfg_get(cfg, "head_dim"))
    n_kv = int(cfg_get(cfg, "num_key_value_heads"))
    nh = int(cfg_get(cfg, "num_attention_heads"))
    k_eq_v = bool(cfg_get(cfg, "attention_k_eq_v"))

    overrides: dict[int, dict[str, Any]] = {}
    if cfg.get("per_layer_config") is not None:
        for k, v in cfg["per_layer_config"].items():
            idx = int(k)
            if not 0 <= idx < L:
                die(f"per_layer_config key {k!r} out of range")
            overrides[idx] = dict(v)
    else:
        g_hd = cfg_get(cfg, "global_head_dim")
        g_kv = cfg_get(cfg, "num_global_key_value_heads")
        for i, t in enumerate(types):
            if t == FULL:
                o: dict[str, Any] = {}
                if g_hd:
                    o["head_dim"] = int(g_hd)
                if k_eq_v and g_kv is not None:
                    o["num_key_value_heads"] = int(g_kv)
                overrides[i] = o

    n_shared = int(cfg_get(cfg, "num_kv_shared_layers") or 0)
    if n_shared < 0 or n_shared >= L:
        die(f"num_kv_shared_layers={n_shared} unsupported (need 0 <= n < {L})")
    first_shared = L - n_shared
    prev = types[:first_shared]
    inter = int(cfg_get(cfg, "intermediate_size"))
    double = bool(cfg_get(cfg, "use_double_wide_mlp"))
    window = int(cfg_get(cfg, "sliding_window"))

    out = []
    for i, t in enumerate(types):
        o = overrides.get(i, {})
        d = int(o.get("head_dim", head_dim))
        kv = int(o.get("num_key_value_heads", n_kv))
        if nh % kv:
            die(f"layer {i}: num_attention_heads {nh} not divisible by kv heads {kv}")
        shared = n_shared > 0 and i >= first_shared
        donor = None
        if shared:
            if t not in prev:
                die(f"layer {i} ({t}) is KV-shared but no earlier non-shared layer has that type")
            donor = len(prev) - 1 - prev[::-1].index(t)
        out.append(
            {
                "index": i,
                "layer_type": t,
                "head_dim": d,
                "num_kv_heads": kv,
                "kv_shared": shared,
                "kv_donor": donor,
                "has_k_proj": not shared,
                "has_v_proj": (not shared) and not (k_eq_v and t == FULL),
                "mlp_intermediate": inter * (2 if (double and shared) else 1),
                "sliding_window": window if t == SLIDING else None,
            }
        )
    return out


def expected_state_dict_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Expected checkpoint tensors (HF text-export names), lm_head only when untied."""
    V = int(cfg_get(cfg, "vocab_size"))
    H = int(cfg_get(cfg, "hidden_size"))
    L = int(cfg_get(cfg, "num_hidden_layers"))
    nh = int(cfg_get(cfg, "num_attention_heads"))
    P = int(cfg_get(cfg, "hidden_size_per_layer_input") or 0)
    Vp = int(cfg_get(cfg, "vocab_size_per_layer_input"))
    moe = bool(cfg_get(cfg, "enable_moe_block"))
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, H)}
    if P:
        shapes["model.embed_tokens_per_layer.weight"] = (Vp, L * P)
        shapes["model.per_layer_model_projection.weight"] = (L * P, H)
        shapes["model.per_layer_projection_norm.weight"] = (P,)
    shapes["model.norm.weight"] = (H,)
    if not cfg_get(cfg, "tie_word_embeddings"):
        shapes["lm_head.weight"] = (V, H)
    for g in layer_geometry(cfg):
        p = f"model.layers.{g['index']}."
        d, kv, I = g["head_dim"], g["num_kv_heads"], g["mlp_intermediate"]
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            shapes[p + n + ".weight"] = (H,)
        shapes[p + "self_attn.q_proj.weight"] = (nh * d, H)
        shapes[p + "self_attn.q_norm.weight"] = (d,)
        if g["has_k_proj"]:
            shapes[p + "self_attn.k_proj.weight"] = (kv * d, H)
            shapes[p + "self_attn.k_norm.weight"] = (d,)
        if g["has_v_proj"]:
            shapes[p + "self_attn.v_proj.weight"] = (kv * d, H)
        shapes[p + "self_attn.o_proj.weight"] = (H, nh * d)
        shapes[p + "mlp.gate_proj.weight"] = (I, H)
        shapes[p + "mlp.up_proj.weight"] = (I, H)
        shapes[p + "mlp.down_proj.weight"] = (H, I)
        shapes[p + "layer_scalar"] = (1,)
        if P:
            shapes[p + "per_layer_input_gate.weight"] = (P, H)
            shapes[p + "per_layer_projection.weight"] = (H, P)
            shapes[p + "post_per_layer_input_norm.weight"] = (H,)
        if moe:
            E = int(cfg_get(cfg, "num_experts"))
            Im = int(cfg_get(cfg, "moe_intermediate_size"))
            shapes[p + "router.proj.weight"] = (E, H)
            shapes[p + "router.scale"] = (H,)
            shapes[p + "router.per_expert_scale"] = (E,)
            shapes[p + "experts.gate_up_proj"] = (E, 2 * Im, H)
            shapes[p + "experts.down_proj"] = (E, H, Im)
            shapes[p + "pre_feedforward_layernorm_2.weight"] = (H,)
            shapes[p + "post_feedforward_layernorm_1.weight"] = (H,)
            shapes[p + "post_feedforward_layernorm_2.weight"] = (H,)
    return shapes


def make_prompts(vocab_size: int) -> list[list[int]]:
    """Deterministic prompts without torch (64-bit LCG, seeded)."""
    prompts = []
    for i, T in enumerate(PROMPT_LENGTHS):
        state = (PROMPT_SEED * 1_000_003 + i * 7919) & ((1 << 64) - 1)
        ids = []
        for _ in range(T):
            state = (state * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
            ids.append(FIRST_RANDOM_TOKEN + (state >> 33) % (vocab_size - FIRST_RANDOM_TOKEN))
        if T > 1:
            ids[0] = BOS_ID
        prompts.append([int(t) for t in ids])
    return prompts


def print_expected_keys(names: list[str]) -> None:
    for name in names:
        cfg = SPECS[name]["config"]
        log(f"== {name}: {SPECS[name]['description']}")
        for g in layer_geometry(cfg):
            log(f"   layer {g['index']}: {g['layer_type']:<17} head_dim={g['head_dim']} kv_heads={g['num_kv_heads']}"
                f" shared={g['kv_shared']} donor={g['kv_donor']} v_proj={g['has_v_proj']}"
                f" mlp={g['mlp_intermediate']} window={g['sliding_window']}")
        shapes = expected_state_dict_shapes(cfg)
        total = 0
        for k, s in shapes.items():
            n = math.prod(s)
            total += n
            log(f"   {k} {list(s)}")
        log(f"   -> {len(shapes)} tensors, {total} values, {2 * total / 1e6:.2f} MB as bf16")
        log(f"   prompts: {make_prompts(int(cfg['vocab_size']))[:2]} ...")


# --------------------------------------------------------------------------------------------
# Torch / transformers helpers (imported lazily)
# --------------------------------------------------------------------------------------------

_MODS: dict[str, Any] = {}


def import_deps() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as e:
        die(f"torch is required ({e}); run this on the GPU machine")
    try:
        import transformers
    except ImportError as e:
        die(f"transformers is required ({e})")
    try:
        import safetensors.torch as st
    except ImportError as e:
        die(f"safetensors is required ({e})")
    try:
        from transformers import Gemma4ForCausalLM, Gemma4TextConfig
    except ImportError:
        try:
            from transformers.models.gemma4 import Gemma4ForCausalLM, Gemma4TextConfig
        except ImportError as e:
            die(f"transformers {transformers.__version__} has no Gemma 4 ({e}); need 5.x (target 5.17)")
    try:
        from transformers import GenerationConfig
    except ImportError as e:
        die(f"cannot import GenerationConfig: {e}")
    import torch

    _MODS.update(torch=torch, transformers=transformers, st=st, Gemma4ForCausalLM=Gemma4ForCausalLM,
                 Gemma4TextConfig=Gemma4TextConfig, GenerationConfig=GenerationConfig)
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        die(f"transformers {transformers.__version__} is too old; need 5.x (target 5.17)")
    if not transformers.__version__.startswith("5.17"):
        warn(f"transformers {transformers.__version__} is not the targeted 5.17; continuing")
    if not torch.__version__.startswith("2.11"):
        warn(f"torch {torch.__version__} is not the targeted 2.11; continuing")


def setup_numerics(device: str) -> dict[str, Any]:
    torch = _MODS["torch"]
    info: dict[str, Any] = {}
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except Exception as e:  # pragma: no cover - depends on torch build
        warn(f"could not disable TF32 via allow_tf32 flags: {e}")
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception as e:  # pragma: no cover
        warn(f"set_float32_matmul_precision('highest') failed: {e}")
    try:
        info["cuda_matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        info["cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
    except Exception as e:  # pragma: no cover
        info["tf32_readback_error"] = str(e)
    if info.get("cuda_matmul_allow_tf32") or info.get("cudnn_allow_tf32"):
        die(f"TF32 is still enabled: {info}")
    info["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    info["device"] = device
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def to_jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return str(x)
    return x


def config_to_dict(config: Any) -> dict[str, Any]:
    """The full dict transformers would serialise (never touches per-layer attributes)."""
    return json.loads(config.to_json_string(use_diff=False))


def force_eager(model: Any, what: str) -> None:
    """Eager attention and eager experts on `model`; verified on every attention module."""
    if hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation("eager")
        except Exception as e:
            warn(f"{what}: set_attn_implementation('eager') raised {e}; setting config attribute")
            model.config._attn_implementation = "eager"
    else:
        model.config._attn_implementation = "eager"
    impls = {getattr(m.config, "_attn_implementation", None)
             for m in model.modules() if type(m).__name__ == "Gemma4TextAttention"}
    if impls != {"eager"}:
        die(f"{what}: attention implementation is {impls}, wanted eager")
    has_experts = any(type(m).__name__ == "Gemma4TextExperts" for m in model.modules())
    if has_experts:
        done = False
        if hasattr(model, "set_experts_implementation"):
            try:
                model.set_experts_implementation("eager")
                done = True
            except Exception as e:
                warn(f"{what}: set_experts_implementation('eager') raised {e}")
        if not done:
            try:
                model.config._experts_implementation = "eager"
            except Exception as e:
                warn(f"{what}: cannot set config._experts_implementation: {e}")
        impls = {getattr(getattr(m, "config", None), "_experts_implementation", "eager")
                 for m in model.modules() if type(m).__name__ == "Gemma4TextExperts"}
        if impls != {"eager"}:
            warn(f"{what}: experts implementation is {impls}, wanted eager (same math, other summation order; "
                 "the float64 reference check still applies)")


def build_model(spec_cfg: dict[str, Any], seed: int) -> tuple[Any, Any]:
    torch = _MODS["torch"]
    Gemma4TextConfig = _MODS["Gemma4TextConfig"]
    Gemma4ForCausalLM = _MODS["Gemma4ForCausalLM"]
    torch.manual_seed(seed)
    try:
        config = Gemma4TextConfig(**spec_cfg)
    except Exception as e:
        die(f"Gemma4TextConfig rejected the spec kwargs: {type(e).__name__}: {e}")
    try:
        config._attn_implementation = "eager"
    except Exception as e:
        warn(f"config._attn_implementation assignment failed ({e}); will set on the model")
    model = Gemma4ForCausalLM(config)
    model = model.float().eval()
    force_eager(model, "built model")
    return config, model


def check_config(spec_cfg: dict[str, Any], cfgd: dict[str, Any]) -> None:
    """Every key we passed must be stored with our value (or converted, for the two legacy keys)."""
    problems = []
    for k, v in spec_cfg.items():
        if k in CONVERTED_KEYS and "per_layer_config" in cfgd and k not in cfgd:
            continue  # 5.15+: converted into per_layer_config, verified through the geometry
        if k not in cfgd:
            problems.append(f"{k}: passed {v!r}, absent from config dict (unknown kwarg silently dropped?)")
            continue
        got = cfgd[k]
        if k == "rope_parameters":
            for t, params in v.items():
                for pk, pv in params.items():
                    gv = (got.get(t) or {}).get(pk)
                    if gv != pv:
                        problems.append(f"rope_parameters[{t}][{pk}]: passed {pv!r}, stored {gv!r}")
            continue
        if got != v:
            problems.append(f"{k}: passed {v!r}, stored {got!r}")
    if problems:
        die("config does not hold what was passed:\n  " + "\n  ".join(problems))


def geometry_from_model(model: Any) -> list[dict[str, Any]]:
    layers = model.model.layers
    out = []
    for i, layer in enumerate(layers):
        attn = layer.self_attn
        d = int(attn.head_dim)
        k_proj = getattr(attn, "k_proj", None)
        v_proj = getattr(attn, "v_proj", None)
        kv_heads = int(k_proj.weight.shape[0] // d) if k_proj is not None else None
        shared = bool(getattr(attn, "is_kv_shared_layer", k_proj is None))
        if shared != (k_proj is None):
            die(f"layer {i}: is_kv_shared_layer={shared} but k_proj is {'absent' if k_proj is None else 'present'}")
        if float(getattr(attn, "scaling", 1.0)) != 1.0:
            die(f"layer {i}: attention scaling is {attn.scaling}, expected 1.0")
        entry = {}
        if shared and getattr(attn, "kv_shared_layer_index", None) is not None:  # older revisions only
            entry["kv_donor"] = int(attn.kv_shared_layer_index)
        out.append(
            entry | {
                "index": i,
                "layer_type": attn.layer_type,
                "head_dim": d,
                "num_kv_heads": kv_heads,
                "num_key_value_groups": int(getattr(attn, "num_key_value_groups", -1)),
                "kv_shared": shared,
                "has_k_proj": k_proj is not None,
                "has_v_proj": v_proj is not None,
                "mlp_intermediate": int(layer.mlp.gate_proj.weight.shape[0]),
                "sliding_window": attn.sliding_window,
                "q_rows": int(attn.q_proj.weight.shape[0]),
            }
        )
    return out


def compare_geometry(expected: list[dict[str, Any]], actual: list[dict[str, Any]], nh: int, what: str) -> None:
    if len(expected) != len(actual):
        die(f"{what}: {len(actual)} layers, expected {len(expected)}")
    problems = []
    for e, a in zip(expected, actual):
        i = e["index"]
        for key in ("layer_type", "head_dim", "kv_shared", "kv_donor", "has_k_proj", "has_v_proj",
                    "mlp_intermediate", "sliding_window"):
            if key in a and a[key] != e[key]:
                problems.append(f"layer {i} {key}: got {a[key]!r}, expected {e[key]!r}")
        if a.get("num_kv_heads") is not None and a["num_kv_heads"] != e["num_kv_heads"]:
            problems.append(f"layer {i} num_kv_heads: got {a['num_kv_heads']}, expected {e['num_kv_heads']}")
        if "num_key_value_groups" in a and a["num_key_value_groups"] not in (-1, nh // e["num_kv_heads"]):
            problems.append(f"layer {i} num_key_value_groups: got {a['num_key_value_groups']},"
                            f" expected {nh // e['num_kv_heads']}")
        if "q_rows" in a and a["q_rows"] != nh * e["head_dim"]:
            problems.append(f"layer {i} q_proj rows {a['q_rows']} != {nh}*{e['head_dim']}")
    if problems:
        die(f"{what}: geometry mismatch:\n  " + "\n  ".join(problems))


def describe_tensors(model: Any) -> None:
    log("  parameters:")
    for n, p in model.named_parameters():
        log(f"    P {n} {list(p.shape)} {str(p.dtype).replace('torch.', '')}")
    log("  buffers:")
    for mod_name, mod in model.named_modules():
        nonpersistent = getattr(mod, "_non_persistent_buffers_set", set())
        for bn, b in mod.named_buffers(recurse=False):
            full = f"{mod_name}.{bn}" if mod_name else bn
            kind = "non-persistent (not saved, derived)" if bn in nonpersistent else "PERSISTENT (saved)"
            log(f"    B {full} {list(b.shape)} {str(b.dtype).replace('torch.', '')} {kind}")


def perturb_and_round(model: Any, seed: int, cfgd: dict[str, Any]) -> None:
    """Give every parameter/persistent buffer a non-trivial value, then round all to bf16."""
    torch = _MODS["torch"]
    nn = torch.nn
    g = torch.Generator().manual_seed(10_000 + seed)
    H = int(cfgd["hidden_size"])

    def randn(shape):
        return torch.randn(tuple(shape), generator=g, dtype=torch.float32)

    def uniform(shape, lo, hi):
        return torch.rand(tuple(shape), generator=g, dtype=torch.float32) * (hi - lo) + lo

    tied = bool(cfgd.get("tie_word_embeddings", True))
    lm_w = model.lm_head.weight
    emb_w = model.model.embed_tokens.weight
    if tied and lm_w.data_ptr() != emb_w.data_ptr():
        die("tie_word_embeddings is true but lm_head.weight does not share storage with model.embed_tokens.weight")

    covered: set[str] = set()
    done_ids: set[int] = set()

    def assign(name: str, tensor: Any, value: Any) -> None:
        if id(tensor) in done_ids:
            covered.add(name)
            return
        if tuple(value.shape) != tuple(tensor.shape):
            die(f"internal: value shape {tuple(value.shape)} != {name} {tuple(tensor.shape)}")
        tensor.data.copy_(value.to(tensor.dtype))
        done_ids.add(id(tensor))
        covered.add(name)

    with torch.no_grad():
        for mod_name, mod in model.named_modules():
            pre = f"{mod_name}." if mod_name else ""
            cls = type(mod).__name__
            own_params = dict(mod.named_parameters(recurse=False))
            nonpersistent = getattr(mod, "_non_persistent_buffers_set", set())
            own_bufs = {n: b for n, b in mod.named_buffers(recurse=False) if n not in nonpersistent}
            if not own_params and not own_bufs:
                continue
            if isinstance(mod, nn.Embedding):
                if mod_name.endswith("embed_tokens_per_layer"):
                    std = PLE_EMBED_STD_X_SQRT_P / math.sqrt(int(cfgd["hidden_size_per_layer_input"]))
                elif mod_name.endswith("embed_tokens"):
                    std = EMBED_STD_X_SQRT_H / math.sqrt(H)
                else:
                    die(f"unexpected embedding module {mod_name}")
                assign(pre + "weight", mod.weight, randn(mod.weight.shape) * std)
                own_params.pop("weight")
            elif isinstance(mod, nn.Linear):
                if mod_name == "lm_head" and tied:
                    covered.add("lm_head.weight")  # same storage as model.embed_tokens.weight
                else:
                    gain = ROUTER_PROJ_GAIN if mod_name.endswith("router.proj") else 1.0
                    std = gain / math.sqrt(mod.in_features)
                    assign(pre + "weight", mod.weight, randn(mod.weight.shape) * std)
                own_params.pop("weight")
                if "bias" in own_params:
                    assign(pre + "bias", mod.bias, randn(mod.bias.shape) * 0.1)
                    own_params.pop("bias")
            elif cls.endswith("RMSNorm"):
                if "weight" in own_params:
                    gain = (FINAL_NORM_GAIN if mod_name == "model.norm"
                            else Q_NORM_GAIN if mod_name.endswith("self_attn.q_norm") else 1.0)
                    assign(pre + "weight", mod.weight, gain * (1.0 + NORM_JITTER * randn(mod.weight.shape)))
                    own_params.pop("weight")
            elif cls == "Gemma4TextRouter":
                assign(pre + "scale", mod.scale, math.sqrt(H) * (1.0 + NORM_JITTER * randn(mod.scale.shape)))
                assign(pre + "per_expert_scale", mod.per_expert_scale,
                       uniform(mod.per_expert_scale.shape, *PER_EXPERT_SCALE_RANGE))
                own_params.pop("scale")
                own_params.pop("per_expert_scale")
            elif cls == "Gemma4TextExperts":
                gu, dn = mod.gate_up_proj, mod.down_proj
                assign(pre + "gate_up_proj", gu, randn(gu.shape) / math.sqrt(gu.shape[-1]))
                assign(pre + "down_proj", dn, randn(dn.shape) / math.sqrt(dn.shape[-1]))
                own_params.pop("gate_up_proj")
                own_params.pop("down_proj")
            if cls == "Gemma4TextDecoderLayer" and "layer_scalar" in own_bufs:
                assign(pre + "layer_scalar", mod.layer_scalar, uniform(mod.layer_scalar.shape, *LAYER_SCALAR_RANGE))
                own_bufs.pop("layer_scalar")
            leftovers = [pre + n for n in own_params] + [pre + n for n in own_bufs]
            if leftovers:
                die(f"no perturbation rule for {leftovers} (module class {cls}); "
                    "a new parameter/buffer appeared in this transformers version - extend perturb_and_round")

        sd_keys = set(model.state_dict().keys())
        missing = sorted(sd_keys - covered)
        if missing:
            die(f"state_dict entries not perturbed: {missing}")
        # Round every saved tensor to bf16 (the in-memory f32 model then holds exactly the stored values).
        for _, mod in model.named_modules():
            nonpersistent = getattr(mod, "_non_persistent_buffers_set", set())
            for _, p in mod.named_parameters(recurse=False):
                p.data.copy_(p.data.to(torch.bfloat16).to(p.dtype))
            for bn, b in mod.named_buffers(recurse=False):
                if bn not in nonpersistent and b.is_floating_point():
                    b.data.copy_(b.data.to(torch.bfloat16).to(b.dtype))


def export_state_dict(model: Any, cfgd: dict[str, Any]) -> dict[str, Any]:
    """HF text-export tensors (f32, bf16-representable), lm_head dropped when tied."""
    torch = _MODS["torch"]
    sd = model.state_dict()
    out = {}
    tied = bool(cfgd.get("tie_word_embeddings", True))
    for k, v in sd.items():
        if k == "lm_head.weight" and tied:
            if not torch.equal(v, sd["model.embed_tokens.weight"]):
                die("tied lm_head.weight differs from model.embed_tokens.weight")
            continue
        out[k] = v.detach().to("cpu", torch.float32).contiguous()
        if not torch.equal(out[k], out[k].to(torch.bfloat16).to(torch.float32)):
            die(f"{k} is not bf16-representable after rounding")
    return out


def check_shapes(sd: dict[str, Any], cfgd: dict[str, Any], what: str) -> None:
    expected = expected_state_dict_shapes(cfgd)
    got = {k: tuple(v.shape) for k, v in sd.items()}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    bad = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
    if missing or extra or bad:
        die(f"{what}: state_dict differs from the expected layout\n  missing: {missing}\n  unexpected: {extra}\n"
            f"  wrong shape: {[(k, got[k], expected[k]) for k in bad]}")


def expected_inv_freq(cfgd: dict[str, Any], layer_type: str, head_dim: int) -> Any:
    """RoPE inverse frequencies exactly as transformers computes them (f32)."""
    torch = _MODS["torch"]
    rp = cfgd["rope_parameters"][layer_type]
    theta = float(rp["rope_theta"])
    rtype = rp.get("rope_type", "default")
    if rtype == "default":
        return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if rtype == "proportional":
        frac = float(rp.get("partial_rotary_factor", 1.0))
        n_rot = int(frac * head_dim // 2)
        rot = 1.0 / (theta ** (torch.arange(0, 2 * n_rot, 2, dtype=torch.int64).float() / head_dim))
        nope = head_dim // 2 - n_rot
        inv = torch.cat([rot, torch.zeros(nope, dtype=torch.float32)]) if nope > 0 else rot
        return inv / float(rp.get("factor", 1.0))
    die(f"rope_type {rtype!r} not supported by the reference")


def check_rope(model: Any, cfgd: dict[str, Any], geo: list[dict[str, Any]]) -> None:
    torch = _MODS["torch"]
    rot = model.model.rotary_emb
    for t in sorted({g["layer_type"] for g in geo}):
        d = next(g["head_dim"] for g in geo if g["layer_type"] == t)
        buf = getattr(rot, f"{t}_inv_freq", None)
        if buf is None:
            warn(f"rotary_emb has no {t}_inv_freq buffer; RoPE formula not checked (internals changed?)")
            continue
        exp = expected_inv_freq(cfgd, t, d)
        got = buf.detach().float().cpu()
        if got.shape != exp.shape or not torch.allclose(got, exp, rtol=1e-6, atol=0.0):
            die(f"RoPE {t}: transformers inv_freq {got.tolist()} != documented formula {exp.tolist()}")
        log(f"  rope {t}: d={d}, {int((exp > 0).sum())} rotated pairs of {d // 2}, matches documented formula")


def write_model_dir(model: Any, config: Any, out_dir: Path, sd: dict[str, Any]) -> dict[str, Any]:
    torch = _MODS["torch"]
    st = _MODS["st"]
    GenerationConfig = _MODS["GenerationConfig"]
    out_dir.mkdir(parents=True, exist_ok=True)
    cfgd = config_to_dict(config)
    cfgd["architectures"] = ["Gemma4ForCausalLM"]
    cfgd["dtype"] = "bfloat16"
    cfgd.pop("torch_dtype", None)
    (out_dir / "config.json").write_text(json.dumps(to_jsonable(cfgd), indent=2, sort_keys=True) + "\n")
    gen = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=[1, 106], pad_token_id=0,
                           do_sample=True, temperature=1.0, top_k=64, top_p=0.95)
    gen.save_pretrained(str(out_dir))
    if not (out_dir / "generation_config.json").exists():
        die("GenerationConfig.save_pretrained did not write generation_config.json")
    bf16 = {k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}
    st.save_file(bf16, str(out_dir / "model.safetensors"), metadata={"format": "pt"})

    # Cross-check our names against what save_pretrained writes (catches reverse conversion mappings).
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        files = sorted(Path(tmp).glob("*.safetensors"))
        if not files:
            die(f"save_pretrained wrote no safetensors files: {os.listdir(tmp)}")
        hf_shapes: dict[str, tuple[int, ...]] = {}
        for f in files:
            for k, v in st.load_file(str(f)).items():
                hf_shapes[k] = tuple(v.shape)
    ours = {k: tuple(v.shape) for k, v in sd.items()}
    if hf_shapes != ours:
        die("save_pretrained writes different tensors than this tool:\n"
            f"  only save_pretrained: {sorted(set(hf_shapes) - set(ours))}\n"
            f"  only ours: {sorted(set(ours) - set(hf_shapes))}\n"
            f"  shape differs: {sorted(k for k in set(ours) & set(hf_shapes) if ours[k] != hf_shapes[k])}")
    return cfgd


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_model_dir(model_dir: Path, device: str) -> Any:
    torch = _MODS["torch"]
    Gemma4ForCausalLM = _MODS["Gemma4ForCausalLM"]
    try:
        model, info = Gemma4ForCausalLM.from_pretrained(
            str(model_dir), dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    except TypeError:
        model, info = Gemma4ForCausalLM.from_pretrained(
            str(model_dir), torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    missing = set(info.get("missing_keys", []) or []) - {"lm_head.weight"}
    unexpected = set(info.get("unexpected_keys", []) or [])
    mismatched = list(info.get("mismatched_keys", []) or [])
    errors = list(info.get("error_msgs", []) or [])
    if missing or unexpected or mismatched or errors:
        die(f"loading {model_dir} was not clean: missing={sorted(missing)} unexpected={sorted(unexpected)} "
            f"mismatched={mismatched} errors={errors}")
    model = model.float().eval()
    force_eager(model, f"reloaded {model_dir.name}")
    for p in model.parameters():
        if p.dtype != torch.float32:
            die(f"reloaded parameter dtype {p.dtype}, expected float32")
    return model.to(device)


class RouterGapRecorder:
    """Records the smallest gap between the k-th and (k+1)-th router probability."""

    def __init__(self, model: Any, top_k: int | None):
        self.min_gap = math.inf
        self.handles = []
        self.top_k = top_k
        if not top_k:
            return
        for m in model.modules():
            if type(m).__name__ == "Gemma4TextRouter":
                self.handles.append(m.register_forward_hook(self._hook))

    def _hook(self, _mod: Any, _inp: Any, out: Any) -> None:
        try:
            probs = out[0].detach().float()
            if probs.shape[-1] <= self.top_k:
                return
            s = probs.sort(dim=-1, descending=True).values
            gap = float((s[..., self.top_k - 1] - s[..., self.top_k]).min())
            self.min_gap = min(self.min_gap, gap)
        except Exception as e:  # pragma: no cover - output format changed
            warn(f"router hook could not read router output: {e}")

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def forward_logits(model: Any, ids: list[int], device: str) -> Any:
    torch = _MODS["torch"]
    with torch.no_grad():
        x = torch.tensor([ids], dtype=torch.long, device=device)
        out = model(input_ids=x, use_cache=False)
    logits = out.logits
    if logits.dim() != 3 or logits.shape[0] != 1 or logits.shape[1] != len(ids):
        die(f"unexpected logits shape {tuple(logits.shape)} for {len(ids)} tokens")
    return logits[0].float()


def greedy_nocache(model: Any, prompt: list[int], device: str) -> tuple[list[int], Any, list[float]]:
    torch = _MODS["torch"]
    seq = list(prompt)
    toks, rows, margins = [], [], []
    for _ in range(GREEDY_STEPS):
        row = forward_logits(model, seq, device)[-1]
        tok = int(torch.argmax(row))
        top2 = torch.topk(row, 2).values
        margins.append(float(top2[0] - top2[1]))
        toks.append(tok)
        rows.append(row.cpu())
        seq.append(tok)
    return toks, torch.stack(rows), margins


def greedy_cached(model: Any, prompt: list[int], device: str) -> tuple[list[int], Any]:
    torch = _MODS["torch"]
    toks, rows = [], []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt], dtype=torch.long, device=device), use_cache=True)
        pkv = out.past_key_values
        row = out.logits[0, -1].float()
        for step in range(GREEDY_STEPS):
            tok = int(torch.argmax(row))
            toks.append(tok)
            rows.append(row.cpu())
            if step + 1 == GREEDY_STEPS:
                break
            out = model(input_ids=torch.tensor([[tok]], dtype=torch.long, device=device),
                        past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            row = out.logits[0, -1].float()
    return toks, torch.stack(rows)


def greedy_generate(model: Any, prompt: list[int], device: str) -> list[int]:
    torch = _MODS["torch"]
    GenerationConfig = _MODS["GenerationConfig"]
    saved = model.generation_config
    try:
        model.generation_config = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0,
                                                   bos_token_id=BOS_ID, max_new_tokens=GREEDY_STEPS)
        ids = torch.tensor([prompt], dtype=torch.long, device=device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=GREEDY_STEPS)
    finally:
        model.generation_config = saved
    seq = out[0].tolist() if hasattr(out, "tolist") else out.sequences[0].tolist()
    if seq[: len(prompt)] != list(prompt):
        die("generate() output does not start with the prompt")
    return seq[len(prompt):]


# --------------------------------------------------------------------------------------------
# Independent reference forward (float64), written from docs/gemma4-transformers-notes.md
# --------------------------------------------------------------------------------------------


def reference_forward(sd: dict[str, Any], cfg: dict[str, Any], ids: list[int]) -> Any:
    torch = _MODS["torch"]
    Fn = torch.nn.functional
    f64 = torch.float64
    geo = layer_geometry(cfg)

    def w(name: str) -> Any:
        if name not in sd:
            die(f"reference: tensor {name} missing from checkpoint")
        return sd[name].to(f64)

    H = int(cfg["hidden_size"])
    L = int(cfg["num_hidden_layers"])
    nh = int(cfg["num_attention_heads"])
    eps = float(cfg_get(cfg, "rms_norm_eps"))
    P = int(cfg_get(cfg, "hidden_size_per_layer_input") or 0)
    moe = bool(cfg_get(cfg, "enable_moe_block"))
    T = len(ids)
    idx = torch.tensor(ids, dtype=torch.long)

    def rms(x: Any, weight: Any = None) -> Any:
        y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)
        return y * weight if weight is not None else y

    def gelu(x: Any) -> Any:
        return Fn.gelu(x, approximate="tanh")

    def f32(x: float) -> float:  # transformers casts python-side scales to the f32 weight dtype
        return float(torch.tensor(x, dtype=torch.float32))

    pos = torch.arange(T, dtype=f64)

    def rope(x: Any, layer_type: str, d: int) -> Any:  # x [T, heads, d]
        inv = expected_inv_freq(cfg, layer_type, d).to(f64)
        ang = pos[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
        return x * cos + rot * sin

    emb = w("model.embed_tokens.weight")
    h = emb[idx] * f32(math.sqrt(H))
    pli = None
    if P:
        tok = (w("model.embed_tokens_per_layer.weight")[idx] * f32(math.sqrt(P))).view(T, L, P)
        ctx = (h @ w("model.per_layer_model_projection.weight").T) * (H ** -0.5)
        ctx = rms(ctx.view(T, L, P), w("model.per_layer_projection_norm.weight"))
        pli = (ctx + tok) * (2.0 ** -0.5)

    qi = torch.arange(T)[:, None]
    kj = torch.arange(T)[None, :]
    kv_by_layer: dict[int, tuple[Any, Any]] = {}
    for g in geo:
        i, t, d = g["index"], g["layer_type"], g["head_dim"]
        p = f"model.layers.{i}."
        x = rms(h, w(p + "input_layernorm.weight"))
        q = (x @ w(p + "self_attn.q_proj.weight").T).view(T, nh, d)
        q = rope(rms(q, w(p + "self_attn.q_norm.weight")), t, d)
        if g["kv_shared"]:
            k, v = kv_by_layer[g["kv_donor"]]
        else:
            kr = (x @ w(p + "self_attn.k_proj.weight").T).view(T, -1, d)
            vr = (x @ w(p + "self_attn.v_proj.weight").T).view(T, -1, d) if g["has_v_proj"] else kr
            k = rope(rms(kr, w(p + "self_attn.k_norm.weight")), t, d)
            v = rms(vr)
            kv_by_layer[i] = (k, v)
        rep = nh // k.shape[1]
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, kk)  # scaling 1.0
        allowed = kj <= qi
        if t == SLIDING:
            allowed = allowed & (kj > qi - g["sliding_window"])
        scores = scores.masked_fill(~allowed, float("-inf"))
        o = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vv).reshape(T, nh * d)
        h = h + rms(o @ w(p + "self_attn.o_proj.weight").T, w(p + "post_attention_layernorm.weight"))
        res = h
        y = rms(res, w(p + "pre_feedforward_layernorm.weight"))
        m = (gelu(y @ w(p + "mlp.gate_proj.weight").T) * (y @ w(p + "mlp.up_proj.weight").T)) \
            @ w(p + "mlp.down_proj.weight").T
        if moe:
            K = int(cfg["top_k_experts"])
            Im = int(cfg["moe_intermediate_size"])
            m1 = rms(m, w(p + "post_feedforward_layernorm_1.weight"))
            r = rms(res) * w(p + "router.scale") * (H ** -0.5)
            probs = torch.softmax(r @ w(p + "router.proj.weight").T, dim=-1)
            top_w, top_i = torch.topk(probs, K, dim=-1)
            top_w = top_w / top_w.sum(-1, keepdim=True)
            top_w = top_w * w(p + "router.per_expert_scale")[top_i]
            xe = rms(res, w(p + "pre_feedforward_layernorm_2.weight"))
            gu, dn = w(p + "experts.gate_up_proj"), w(p + "experts.down_proj")
            acc = torch.zeros_like(xe)
            for s in range(K):
                e = top_i[:, s]
                z = torch.einsum("th,tih->ti", xe, gu[e])
                act = gelu(z[:, :Im]) * z[:, Im:]
                acc = acc + torch.einsum("ti,thi->th", act, dn[e]) * top_w[:, s:s + 1]
            m = m1 + rms(acc, w(p + "post_feedforward_layernorm_2.weight"))
        h = res + rms(m, w(p + "post_feedforward_layernorm.weight"))
        if P:
            gte = gelu(h @ w(p + "per_layer_input_gate.weight").T) * pli[:, i, :]
            h = h + rms(gte @ w(p + "per_layer_projection.weight").T, w(p + "post_per_layer_input_norm.weight"))
        h = h * w(p + "layer_scalar")
    h = rms(h, w("model.norm.weight"))
    head = w("lm_head.weight") if "lm_head.weight" in sd else emb
    logits = h @ head.T
    cap = cfg.get("final_logit_softcapping")
    if cap is not None:
        logits = torch.tanh(logits / float(cap)) * float(cap)
    return logits


# --------------------------------------------------------------------------------------------
# Goldens (reusable: any model dir, optionally with replacement weights, e.g. dequantized)
# --------------------------------------------------------------------------------------------


def write_goldens(model_dir: Path, device: str, weights: dict[str, Any] | None = None, stem: str = "goldens",
                  run_generate_check: bool = True, run_reference_check: bool = True,
                  expected_logits: list[Any] | None = None, extra_meta: dict[str, Any] | None = None) -> dict:
    """Compute goldens for the model in `model_dir` and write `{stem}.safetensors` / `{stem}.json` there.

    `weights`: optional {HF name: tensor} replacing checkpoint tensors (e.g. dequantized values);
    shapes must match. `expected_logits`: per-prompt logits of an in-memory model that must agree.
    Returns a summary dict; cross-check failures are listed under "failures".
    """
    torch = _MODS["torch"]
    st = _MODS["st"]
    transformers = _MODS["transformers"]
    cfgd = json.loads((model_dir / "config.json").read_text())
    model = load_model_dir(model_dir, device)
    ckpt = {k: v.float() for k, v in st.load_file(str(model_dir / "model.safetensors")).items()}
    if weights is not None:
        sd_now = model.state_dict()
        for k, v in weights.items():
            if k not in sd_now:
                die(f"replacement weight {k} is not a model tensor")
            if tuple(v.shape) != tuple(sd_now[k].shape):
                die(f"replacement weight {k} shape {tuple(v.shape)} != {tuple(sd_now[k].shape)}")
        with torch.no_grad():
            result = model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=False)
        if result.unexpected_keys:
            die(f"unexpected replacement keys {result.unexpected_keys}")
        ckpt.update({k: v.float().cpu() for k, v in weights.items()})
    else:
        sd_now = model.state_dict()
        for k, v in ckpt.items():
            if not torch.equal(sd_now[k].detach().cpu(), v):
                die(f"reloaded tensor {k} differs from model.safetensors")

    V = int(cfgd["vocab_size"])
    prompts = make_prompts(V)
    top_k = int(cfgd["top_k_experts"]) if cfgd.get("enable_moe_block") else None
    recorder = RouterGapRecorder(model, top_k)
    tensors: dict[str, Any] = {}
    per_prompt = []
    failures: list[str] = []
    all_logits = []
    for i, prompt in enumerate(prompts):
        logits = forward_logits(model, prompt, device).cpu()
        all_logits.append(logits)
        if not torch.isfinite(logits).all():
            die(f"prompt {i}: non-finite logits")
        toks, g_rows, margins = greedy_nocache(model, prompt, device)
        if not torch.equal(g_rows[0], logits[-1]):
            d0 = float((g_rows[0] - logits[-1]).abs().max())
            warn(f"prompt {i}: first greedy step logits differ from the prompt forward by {d0:.3g}")
        tensors[f"prompt_{i}"] = torch.tensor(prompt, dtype=torch.int32)
        tensors[f"logits_{i}"] = logits.contiguous()
        tensors[f"greedy_{i}"] = torch.tensor(toks, dtype=torch.int32)
        tensors[f"greedy_logits_{i}"] = g_rows.contiguous()
        entry: dict[str, Any] = {
            "length": len(prompt),
            "logits_std": float(logits.std()),
            "logits_max_abs": float(logits.abs().max()),
            "greedy": toks,
            "greedy_min_margin": min(margins),
        }
        if min(margins) < 1e-3:
            warn(f"prompt {i}: greedy top-1/top-2 margin {min(margins):.2e} is tiny; "
                 "lower-precision engines may legitimately diverge here")
        # Cache path (manual) and generate() - warnings only.
        try:
            c_toks, c_rows = greedy_cached(model, prompt, device)
            entry["cached_greedy_equal"] = c_toks == toks
            if c_toks == toks:
                entry["cached_step_logits_max_abs_diff"] = float((c_rows - g_rows).abs().max())
            if c_toks != toks:
                warn(f"prompt {i}: cached greedy {c_toks} != no-cache greedy {toks}")
        except Exception as e:
            entry["cached_greedy_error"] = f"{type(e).__name__}: {e}"
            warn(f"prompt {i}: cached greedy loop failed: {entry['cached_greedy_error']}")
            traceback.print_exc()
        if run_generate_check:
            try:
                gen = greedy_generate(model, prompt, device)
                entry["generate_equal"] = gen == toks
                if gen != toks:
                    warn(f"prompt {i}: generate() {gen} != no-cache greedy {toks}")
            except Exception as e:
                entry["generate_error"] = f"{type(e).__name__}: {e}"
                warn(f"prompt {i}: generate() failed: {entry['generate_error']}")
                traceback.print_exc()
        per_prompt.append(entry)
    recorder.close()

    if expected_logits is not None:
        for i, (a, b) in enumerate(zip(all_logits, expected_logits)):
            diff = float((a - b.cpu()).abs().max())
            if diff > 1e-5:
                die(f"prompt {i}: reloaded model logits differ from the in-memory model by {diff:.3g}")

    ref_report: dict[str, Any] = {"run": False}
    if run_reference_check:
        worst = 0.0
        for i, prompt in enumerate(prompts):
            ref = reference_forward(ckpt, cfgd, prompt)
            got = all_logits[i].to(torch.float64)
            diff = float((ref - got).abs().max())
            tol = REF_TOL * (1.0 + float(got.abs().max()))
            worst = max(worst, diff / tol)
            per_prompt[i]["reference_max_abs_diff"] = diff
            if diff > tol:
                failures.append(f"reference forward (docs) differs from transformers on prompt {i}: "
                                f"max |diff| {diff:.3g} > tol {tol:.3g}")
        ref_report = {"run": True, "worst_diff_over_tol": worst}

    all_cat = torch.cat([x.flatten() for x in all_logits])
    meta = {
        "model": model_dir.name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "device": device,
        "compute_dtype": "float32",
        "weights": "model.safetensors" if weights is None else "model.safetensors with replacement weights",
        "model_safetensors_sha256": file_sha256(model_dir / "model.safetensors"),
        "attn_implementation": "eager",
        "prompt_lengths": [len(p) for p in prompts],
        "prompt_rule": f"ids from [{FIRST_RANDOM_TOKEN}, vocab) by a seeded LCG (seed {PROMPT_SEED}); "
                       f"id {BOS_ID} (bos) first when T > 1",
        "greedy_steps": GREEDY_STEPS,
        "greedy_rule": "argmax (lowest index on ties) of the last-position logits of a full no-cache forward "
                       "over prompt+generated; EOS is not special; greedy_logits_i[k] produced greedy_i[k]",
        "logits": "after final_logit_softcapping, every prompt position, single forward, no cache",
        "tensors": {"prompt_i": "int32 [T]", "logits_i": "float32 [T, V]", "greedy_i": f"int32 [{GREEDY_STEPS}]",
                    "greedy_logits_i": f"float32 [{GREEDY_STEPS}, V]"},
        "layers": layer_geometry(cfgd),
        "logits_std": float(all_cat.std()),
        "logits_max_abs": float(all_cat.abs().max()),
        "router_min_topk_gap": None if recorder.min_gap == math.inf else recorder.min_gap,
        "reference_check": ref_report,
        "per_prompt": per_prompt,
        "failures": failures,
    }
    if extra_meta:
        meta.update(extra_meta)
    if top_k and recorder.min_gap < 1e-4:
        warn(f"router top-{top_k} decision gap {recorder.min_gap:.2e} is tiny; expert choice may flip "
             "under different rounding")
    st.save_file({k: v.contiguous() for k, v in tensors.items()}, str(model_dir / f"{stem}.safetensors"),
                 metadata={"format": "pt"})
    (model_dir / f"{stem}.json").write_text(json.dumps(to_jsonable(meta), indent=2) + "\n")
    return meta


# --------------------------------------------------------------------------------------------
# Per-model driver
# --------------------------------------------------------------------------------------------


def make_one(name: str, out_root: Path, device: str, args: argparse.Namespace, numerics: dict) -> dict:
    torch = _MODS["torch"]
    spec = SPECS[name]
    spec_cfg = spec["config"]
    log(f"\n=== {name}: {spec['description']}")
    out_dir = out_root / name
    if out_dir.exists():
        shutil.rmtree(out_dir)

    config, model = build_model(spec_cfg, spec["seed"])
    cfgd = config_to_dict(model.config)
    check_config(spec_cfg, cfgd)
    geo_spec = layer_geometry(spec_cfg)
    nh = int(spec_cfg["num_attention_heads"])
    compare_geometry(geo_spec, layer_geometry(cfgd), nh, "config dict vs spec")
    compare_geometry(geo_spec, geometry_from_model(model), nh, "modules vs spec")
    for g in geo_spec:
        log(f"  layer {g['index']}: {g['layer_type']:<17} d={g['head_dim']} kv={g['num_kv_heads']} "
            f"shared={g['kv_shared']} donor={g['kv_donor']} v_proj={g['has_v_proj']} mlp={g['mlp_intermediate']}")
    log(f"  per_layer_config in config.json: {cfgd.get('per_layer_config', '(absent: legacy layout)')}")
    describe_tensors(model)

    perturb_and_round(model, spec["seed"], cfgd)
    sd = export_state_dict(model, cfgd)
    check_shapes(sd, spec_cfg, "exported state_dict vs spec")
    check_rope(model, cfgd, geo_spec)

    model = model.to(device)
    prompts = make_prompts(int(spec_cfg["vocab_size"]))
    mem_logits = [forward_logits(model, p, device).cpu() for p in prompts]

    cfgd_saved = write_model_dir(model, model.config, out_dir, sd)
    compare_geometry(geo_spec, layer_geometry(cfgd_saved), nh, "config.json vs spec")
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    meta = write_goldens(out_dir, device, run_generate_check=not args.skip_generate_check,
                         run_reference_check=not args.skip_reference_check, expected_logits=mem_logits,
                         extra_meta={"description": spec["description"], "seed": spec["seed"],
                                     "numerics": numerics})
    sizes = {p.name: p.stat().st_size for p in out_dir.iterdir() if p.is_file()}
    total = sum(sizes.values())
    if total > MAX_MODEL_DIR_BYTES:
        warn(f"{name}: directory is {total / 1e6:.2f} MB (> {MAX_MODEL_DIR_BYTES / 1e6:.1f} MB budget)")
    std = meta["logits_std"]
    if not 0.5 <= std <= 30.0:
        warn(f"{name}: logits std {std:.3g} outside the intended O(1-10) range")
    log(f"  logits std {std:.3f}, max|logit| {meta['logits_max_abs']:.3f}, router gap {meta['router_min_topk_gap']}")
    return {
        "name": name,
        "params": sum(v.numel() for v in sd.values()),
        "model_bytes": sizes.get("model.safetensors", 0),
        "dir_bytes": total,
        "logits_std": std,
        "logits_max_abs": meta["logits_max_abs"],
        "min_margin": min(p["greedy_min_margin"] for p in meta["per_prompt"]),
        "failures": meta["failures"],
        "cache": _status(meta["per_prompt"], "cached_greedy_equal", "cached_greedy_error"),
        "generate": ("-" if args.skip_generate_check
                     else _status(meta["per_prompt"], "generate_equal", "generate_error")),
    }


def _status(per_prompt: list[dict], eq_key: str, err_key: str) -> str:
    if any(err_key in p for p in per_prompt):
        return "ERR"
    return "ok" if all(p.get(eq_key, False) for p in per_prompt) else "DIFF"


def print_summary(rows: list[dict]) -> None:
    log("\n" + "=" * 112)
    log(f"{'name':<14}{'params':>10}{'model.st':>11}{'dir':>11}{'logit std':>11}{'max|logit|':>12}"
        f"{'min margin':>12}{'cache':>7}{'generate':>10}{'ref':>6}")
    for r in rows:
        if "error" in r:
            log(f"{r['name']:<14} FAILED: {r['error']}")
            continue
        log(f"{r['name']:<14}{r['params']:>10}{r['model_bytes'] / 1e6:>10.2f}M{r['dir_bytes'] / 1e6:>10.2f}M"
            f"{r['logits_std']:>11.3f}{r['logits_max_abs']:>12.3f}{r['min_margin']:>12.4f}"
            f"{r['cache']:>7}{r['generate']:>10}{('ok' if not r['failures'] else 'FAIL'):>6}")
    log("=" * 112)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/models", help="output root (default: tests/data/models)")
    ap.add_argument("--only", action="append", default=[],
                    help=f"model name (repeatable or comma-separated); one of {', '.join(SPECS)}")
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    ap.add_argument("--skip-generate-check", action="store_true", help="skip the generate() cross-check")
    ap.add_argument("--skip-reference-check", action="store_true",
                    help="skip the float64 re-implementation cross-check")
    ap.add_argument("--print-expected-keys", action="store_true",
                    help="print expected layer geometry and state_dict keys (needs no torch) and exit")
    args = ap.parse_args(argv)

    names = [n.strip() for item in args.only for n in item.split(",") if n.strip()] or list(SPECS)
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        log(f"ERROR: unknown model name(s) {unknown}; choose from {list(SPECS)}")
        return 1
    if args.print_expected_keys:
        print_expected_keys(names)
        return 0

    try:
        import_deps()
    except FatalError as e:
        log(f"FATAL: {e}")
        return 1
    torch = _MODS["torch"]
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        log("FATAL: --device cuda requested but CUDA is not available")
        return 1
    numerics = setup_numerics(device)
    log(f"torch {torch.__version__}, transformers {_MODS['transformers'].__version__}, numerics {numerics}")
    out_root = Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)

    rows, fatal = [], False
    for name in names:
        try:
            rows.append(make_one(name, out_root, device, args, numerics))
        except FatalError as e:
            fatal = True
            log(f"\nFATAL [{name}]: {e}")
            rows.append({"name": name, "error": str(e).splitlines()[0]})
            bad = out_root / name
            if bad.exists():
                shutil.rmtree(bad)
                log(f"  removed incomplete {bad}")
        except Exception as e:
            fatal = True
            traceback.print_exc()
            log(f"\nFATAL [{name}]: unexpected {type(e).__name__}: {e}")
            rows.append({"name": name, "error": f"{type(e).__name__}: {e}"})
            bad = out_root / name
            if bad.exists():
                shutil.rmtree(bad)
                log(f"  removed incomplete {bad}")
    print_summary(rows)
    failures = [(r["name"], f) for r in rows if "failures" in r for f in r["failures"]]
    if failures:
        log("\n" + "!" * 100)
        log("CROSS-CHECK FAILURES (goldens were written from transformers, but the documented forward")
        log("in docs/gemma4-transformers-notes.md disagrees with it - fix the notes/C++ expectations):")
        for n, f in failures:
            log(f"  [{n}] {f}")
        log("!" * 100)
    if fatal:
        return 1
    return 2 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
