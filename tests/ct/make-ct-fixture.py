#!/usr/bin/env python3
"""Writes compressed-tensors checkpoints from the model fixtures, with the format's
documented packing (neuralmagic/compressed-tensors: pack_quantized and naive/int
compressors; ../../../shared/research/formats-and-speculation.md section 2), written
here from the format description and independent of the engine. Python stdlib only.

  make-ct-fixture.py int4 SRC OUT [--unpacked]
      SRC: a GPTQ (v1) or AWQ (GEMM) fixture. Every quantized Linear becomes a
      pack-quantized (or, with --unpacked, int-quantized: one int8 per value) 4-bit
      weight holding the same integers, scales and zero points: W[o, i] =
      (q - zp) * scale is unchanged, so the fixture's reference logits still apply.
      Symmetric GPTQ (zero 8 everywhere) gives a symmetric group; act-order g_idx is
      kept as weight_g_idx (actorder "group").

  make-ct-fixture.py int8 SRC OUT DEQ [--group G] [--asym] [--ignore NAME ...]
      SRC: a float fixture. Linear weights quantized to int8, per output channel
      (or per G columns), symmetric (or with int8 zero points), scales stored as BF16;
      input activations declared dynamic per-token int8 (W8A8). DEQ receives the same
      model with every quantized weight replaced by its exact float32 value
      (q - zp) * scale, as a plain float checkpoint. One weight of the first quantized
      matrix is set to -128 so the whole int8 range is exercised. lm_head and the
      --ignore names (exact names or "re:" patterns) stay in their float type.

  Edits for error tests: --drop TENSOR removes a tensor from OUT.
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys

DTYPES = {"F32": ("f", 4), "F16": ("e", 2), "I32": ("i", 4), "I64": ("q", 8), "I8": ("b", 1), "U8": ("B", 1)}


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], data[b:en])
    return out


def read_dir(d):
    tensors = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            tensors.update(read_st(os.path.join(d, f)))
    return tensors


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dtype, shape, blob = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def values(t):
    dtype, shape, blob = t
    if dtype == "BF16":
        return [struct.unpack("<f", b"\0\0" + blob[i:i + 2])[0] for i in range(0, len(blob), 2)]
    code, size = DTYPES[dtype]
    return list(struct.unpack("<%d%s" % (len(blob) // size, code), blob))


def pack(dtype, vals):
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in vals)
    code, _ = DTYPES[dtype]
    return struct.pack("<%d%s" % (len(vals), code), *vals)


def to_bf16(x):
    """float -> nearest bfloat16 (ties to even), as a float."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", u))[0]


def signed32(u):
    return u - (1 << 32) if u >= 1 << 31 else u


def pack4_rows(q, rows, cols):
    """q[r][c] in -8..7 -> int32 words [rows, ceil(cols/8)], column c in word c/8, nibble c%8."""
    words = (cols + 7) // 8
    out = []
    for r in range(rows):
        for w in range(words):
            u = 0
            for k in range(8):
                c = 8 * w + k
                if c < cols:
                    u |= (q[r][c] + 8) << (4 * k)
            out.append(signed32(u))
    return out


def ct_config(cfg, fmt, bits, sym, group, actorder, act_int8, ignore):
    weights = {"num_bits": bits, "type": "int", "symmetric": sym, "dynamic": False,
               "strategy": "group" if group else "channel", "group_size": group if group else None,
               "actorder": actorder, "observer": "minmax", "observer_kwargs": {}, "block_structure": None}
    acts = None
    if act_int8:
        acts = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": True, "strategy": "token",
                "group_size": None, "actorder": None, "observer": None, "observer_kwargs": {}, "block_structure": None}
    cfg = dict(cfg)
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
        "global_compression_ratio": None, "kv_cache_scheme": None, "sparsity_config": None,
        "ignore": ignore, "version": "0.9.1",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": acts,
                                      "output_activations": None, "format": fmt}}}
    return cfg


def copy_side_files(src, out):
    for f in os.listdir(src):
        if f.endswith(".json") and f not in ("config.json", "quantize_config.json", "model.safetensors.index.json"):
            shutil.copy(os.path.join(src, f), os.path.join(out, f))


def int4(args):
    src = read_dir(args.src)
    cfg = json.load(open(os.path.join(args.src, "config.json")))
    qc = cfg.get("quantization_config")
    if qc is None and os.path.exists(os.path.join(args.src, "quantize_config.json")):
        qc = json.load(open(os.path.join(args.src, "quantize_config.json")))
        qc.setdefault("quant_method", "gptq")
    method, group = qc["quant_method"], qc["group_size"]
    out, all_sym, act_order = {}, True, False
    bases = sorted(n[:-len(".qweight")] for n in src if n.endswith(".qweight"))
    converted = {}
    for base in bases:
        qw, qz, sc = values(src[base + ".qweight"]), values(src[base + ".qzeros"]), values(src[base + ".scales"])
        ng, n_out = src[base + ".scales"][1]
        if method == "awq":
            n_in = src[base + ".qweight"][1][0]
            order = [0, 2, 4, 6, 1, 3, 5, 7]
            q = [[0] * n_in for _ in range(n_out)]
            for i in range(n_in):
                for c in range(n_out // 8):
                    w = qw[i * (n_out // 8) + c] & 0xFFFFFFFF
                    for k in range(8):
                        q[8 * c + order[k]][i] = (w >> (4 * k)) & 0xF
            zero = [[0] * ng for _ in range(n_out)]
            for g in range(ng):
                for c in range(n_out // 8):
                    w = qz[g * (n_out // 8) + c] & 0xFFFFFFFF
                    for k in range(8):
                        zero[8 * c + order[k]][g] = (w >> (4 * k)) & 0xF
            g_idx = None
        else:  # GPTQ v1: stored zero - 1
            n_in = src[base + ".qweight"][1][0] * 8
            q = [[(qw[(i // 8) * n_out + o] & 0xFFFFFFFF) >> (4 * (i % 8)) & 0xF for i in range(n_in)]
                 for o in range(n_out)]
            zw = (n_out + 7) // 8
            zero = [[((qz[g * zw + o // 8] & 0xFFFFFFFF) >> (4 * (o % 8)) & 0xF) + 1 for g in range(ng)]
                    for o in range(n_out)]
            g_idx = values(src[base + ".g_idx"]) if base + ".g_idx" in src else None
            if g_idx is not None and g_idx == [i // group for i in range(n_in)]:
                g_idx = None
        zp = [[z - 8 for z in row] for row in zero]
        if any(z < -8 or z > 7 for row in zp for z in row):
            sys.exit("%s: a zero point outside the 4-bit range cannot be written as compressed-tensors" % base)
        all_sym &= all(z == 0 for row in zp for z in row)
        act_order |= g_idx is not None
        qc_rows = [[v - 8 for v in row] for row in q]
        scale = [sc[g * n_out + o] for o in range(n_out) for g in range(ng)]
        converted[base] = (n_out, n_in, ng, qc_rows, zp, scale, g_idx)
    for base, (n_out, n_in, ng, qrows, zp, scale, g_idx) in converted.items():
        if args.unpacked:
            out[base + ".weight"] = ("I8", [n_out, n_in], pack("I8", [v for row in qrows for v in row]))
        else:
            out[base + ".weight_packed"] = ("I32", [n_out, (n_in + 7) // 8], pack("I32", pack4_rows(qrows, n_out, n_in)))
            out[base + ".weight_shape"] = ("I64", [2], pack("I64", [n_out, n_in]))
        out[base + ".weight_scale"] = ("F16", [n_out, ng], pack("F16", scale))
        if not all_sym:
            if args.unpacked:
                out[base + ".weight_zero_point"] = ("I8", [n_out, ng], pack("I8", [z for row in zp for z in row]))
            else:
                zt = [[zp[o][g] for o in range(n_out)] for g in range(ng)]  # packed along rows
                words = pack4_rows(zt, ng, n_out)
                zw = (n_out + 7) // 8
                out[base + ".weight_zero_point"] = ("I32", [zw, ng],
                                                    pack("I32", [words[g * zw + w] for w in range(zw) for g in range(ng)]))
        if act_order:
            gi = g_idx if g_idx is not None else [i // group for i in range(n_in)]
            out[base + ".weight_g_idx"] = ("I32", [n_in], pack("I32", gi))
    for name, t in src.items():
        base, suffix = name.rsplit(".", 1)
        if base not in converted or suffix not in ("qweight", "qzeros", "scales", "g_idx"):
            out[name] = t
    fmt = "int-quantized" if args.unpacked else "pack-quantized"
    cfg.pop("quantization_config", None)
    cfg = ct_config(cfg, fmt, 4, all_sym, group, "group" if act_order else None, False, ["lm_head"])
    finish(args, cfg, out)


def matches(entry, name):
    return re.match(entry[3:], name) is not None if entry.startswith("re:") else entry == name


def int8(args):
    src = read_dir(args.src)
    cfg = json.load(open(os.path.join(args.src, "config.json")))
    ignore = ["lm_head"] + (args.ignore or [])
    out, deq = {}, {}
    first = True
    for name in sorted(src):
        dtype, shape, blob = src[name]
        base = name[:-len(".weight")] if name.endswith(".weight") else None
        linear = base is not None and len(shape) == 2 and (base.endswith("_proj") or base == "lm_head")
        if not linear or any(matches(e, base) for e in ignore):
            out[name] = deq[name] = src[name]
            continue
        n_out, n_in = shape
        w = values(src[name])
        g = args.group or n_in
        ng = (n_in + g - 1) // g
        q, scale, zp = [0] * (n_out * n_in), [0.0] * (n_out * ng), [0] * (n_out * ng)
        for o in range(n_out):
            for k in range(ng):
                cols = range(k * g, min(n_in, (k + 1) * g))
                xs = [w[o * n_in + c] for c in cols]
                if args.asym:
                    lo, hi = min(xs + [0.0]), max(xs + [0.0])
                    s = to_bf16((hi - lo) / 255.0) or 1.0
                    z = max(-128, min(127, int(round(-128 - lo / s))))
                else:
                    s = to_bf16(max(abs(x) for x in xs) / 127.0) or 1.0
                    z = 0
                scale[o * ng + k], zp[o * ng + k] = s, z
                for c in cols:
                    q[o * n_in + c] = max(-128, min(127, int(round(w[o * n_in + c] / s)) + z))
        if first:
            q[0] = -128
            first = False
        out[name] = ("I8", [n_out, n_in], pack("I8", q))
        out[base + ".weight_scale"] = ("BF16", [n_out, ng], pack("BF16", scale))
        if args.asym:
            out[base + ".weight_zero_point"] = ("I8", [n_out, ng], pack("I8", zp))
        exact = []
        for o in range(n_out):
            for i in range(n_in):
                k = o * ng + i // g
                exact.append(struct.unpack("<f", struct.pack("<f", (q[o * n_in + i] - zp[k]) * scale[k]))[0])
        deq[name] = ("F32", [n_out, n_in], pack("F32", exact))
    plain = dict(cfg)
    plain.pop("quantization_config", None)
    os.makedirs(args.deq, exist_ok=True)
    write_st(os.path.join(args.deq, "model.safetensors"), deq)
    json.dump(plain, open(os.path.join(args.deq, "config.json"), "w"), indent=2)
    copy_side_files(args.src, args.deq)
    cfg = ct_config(plain, "int-quantized", 8, not args.asym, args.group, None, True, ignore)
    finish(args, cfg, out)


def finish(args, cfg, out):
    for name in args.drop or []:
        if name not in out:
            sys.exit("--drop %s: no such tensor" % name)
        del out[name]
    os.makedirs(args.out, exist_ok=True)
    write_st(os.path.join(args.out, "model.safetensors"), out)
    json.dump(cfg, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    copy_side_files(args.src, args.out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("int4")
    a.add_argument("src")
    a.add_argument("out")
    a.add_argument("--unpacked", action="store_true")
    a.add_argument("--drop", action="append")
    b = sub.add_parser("int8")
    b.add_argument("src")
    b.add_argument("out")
    b.add_argument("deq")
    b.add_argument("--group", type=int, default=0)
    b.add_argument("--asym", action="store_true")
    b.add_argument("--ignore", action="append")
    b.add_argument("--drop", action="append")
    args = p.parse_args()
    (int4 if args.cmd == "int4" else int8)(args)


if __name__ == "__main__":
    main()
