#!/usr/bin/env python3
"""Goldens for MLX affine-quantized copies of the tiny reference models.

Run where torch and transformers >= 5.17 exist (the GPU machine), after `lmx convert` made the
quantized directories here:

    python3 tools/make_quantized_goldens.py --pair tests/data/models/tiny-e2b-q4:tests/data/models/tiny-e2b ...

For each QUANT_DIR:BASE_DIR pair it unpacks the MLX codes with an implementation independent of
lmx's (numpy bit unpacking), dequantizes in float32 (w = scale * q + bias per group, scales and
biases taken exactly as stored), maps the tensors back to the HF names of BASE_DIR (MLX
experts.switch_glu.{gate,up}_proj are concatenated into experts.gate_up_proj), runs transformers in
float32 with those weights (tools/make_reference_models.write_goldens) and writes
goldens.safetensors / goldens.json into QUANT_DIR.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_reference_models as ref  # noqa: E402


def unpack_codes(words: np.ndarray, bits: int, cols: int) -> np.ndarray:
    """uint32 [..., cols*bits/32] little-endian bit streams -> uint32 codes [..., cols]."""
    lead = words.shape[:-1]
    as_bytes = words.astype("<u4").view(np.uint8).reshape(*lead, -1)
    bitstream = np.unpackbits(as_bytes, axis=-1, bitorder="little")  # [..., cols*bits]
    bitstream = bitstream[..., : cols * bits].reshape(*lead, cols, bits).astype(np.uint32)
    weights = (1 << np.arange(bits, dtype=np.uint32))
    return (bitstream * weights).sum(axis=-1).astype(np.uint32)


def dequantize(codes, scales, biases, bits: int, group: int):
    torch = ref._MODS["torch"]
    words = codes.cpu().numpy().view(np.uint32)
    cols = words.shape[-1] * 32 // bits
    q = torch.from_numpy(unpack_codes(words, bits, cols).astype(np.float32))
    s = scales.float().repeat_interleave(group, dim=-1)
    b = biases.float().repeat_interleave(group, dim=-1)
    return s * q + b


def dequantized_weights(quant_dir: Path) -> dict:
    st = ref._MODS["st"]
    torch = ref._MODS["torch"]
    config = json.loads((quant_dir / "config.json").read_text())
    block = config.get("quantization")
    if not isinstance(block, dict):
        ref.die(f"{quant_dir}/config.json has no quantization block")
    tensors = st.load_file(str(quant_dir / "model.safetensors"))
    out: dict = {}
    for name, t in tensors.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        if module is not None and module + ".scales" in tensors:
            spec = block.get(module, block)
            if spec is False:
                ref.die(f"{module} has scales but the config says it is not quantized")
            w = dequantize(t, tensors[module + ".scales"], tensors[module + ".biases"], int(spec["bits"]),
                           int(spec["group_size"]))
            out[module + ".weight"] = w
        else:
            out[name] = t.float()
    # MLX expert stacks back to the HF layout.
    for name in [n for n in out if n.endswith("experts.switch_glu.gate_proj.weight")]:
        base = name[: -len("switch_glu.gate_proj.weight")]
        gate = out.pop(name)
        up = out.pop(base + "switch_glu.up_proj.weight")
        out[base + "gate_up_proj"] = torch.cat([gate, up], dim=1)
        out[base + "down_proj"] = out.pop(base + "switch_glu.down_proj.weight")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", action="append", required=True, help="QUANT_DIR:BASE_DIR")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    ref.import_deps()
    torch = ref._MODS["torch"]
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    ref.setup_numerics(device)
    for pair in args.pair:
        quant_dir, base_dir = (Path(p) for p in pair.split(":", 1))
        weights = dequantized_weights(quant_dir)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / base_dir.name
            shutil.copytree(base_dir, work)
            summary = ref.write_goldens(work, device, weights=weights, stem="goldens", run_generate_check=False,
                                        run_reference_check=True,
                                        extra_meta={"quantized_from": str(quant_dir),
                                                    "weights": "dequantized MLX affine codes (float32)"})
            for f in ("goldens.safetensors", "goldens.json"):
                shutil.copy(work / f, quant_dir / f)
        ref.log(f"{quant_dir}: goldens written; failures: {summary.get('failures')}")
        if summary.get("failures"):
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
