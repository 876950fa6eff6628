"""A plain PyTorch DeepSeek-V2 (deepseek_v2) causal LM and a BF16 safetensors reader/writer.

Used only to train and check the bundled default model (models/default/); nothing here runs
at serving time. The forward pass follows the semantics listed in
shared/fixtures/models/README.md ("Semantics followed"), which the engine implements too:

  * RMSNorm: w * x / sqrt(mean(x^2) + eps); q_a_layernorm and kv_a_layernorm use eps 1e-6.
  * MLA: q = q_proj(x) (or q_b_proj(q_a_layernorm(q_a_proj(x))) with q_lora_rank), split per
    head into [qk_nope | qk_rope]; kv_a_proj_with_mqa(x) = [compressed kv (kv_lora_rank) |
    k_pe (qk_rope)], kv_b_proj(kv_a_layernorm(c)) split per head into [k_nope | v].
    RoPE on q's rope dims and the shared k_pe, interleaved pairs (2i, 2i+1) with
    inv_freq[i] = theta^(-2i/d). Softmax scale (qk_nope + qk_rope)^-0.5. DeepSeek YaRN too,
    so tools/check_deepseek_v2_torch.py can hold this file to the fixtures' references.
  * MoE (layer >= first_k_dense_replace and layer % moe_layer_freq == 0): softmax over all
    routed experts (router in float32 or better), greedy top-k, weights = selected scores,
    renormalised if norm_topk_prob and top_k > 1, else times routed_scaling_factor;
    SwiGLU experts; shared experts of width moe_intermediate_size * n_shared_experts.
    Other layers: dense SwiGLU MLP of width intermediate_size.

Parameter names are exactly the Hugging Face ones (model.layers.N.self_attn.kv_b_proj.weight,
...), with nn.Linear's [out, in] layout, so state_dict() is the checkpoint.
"""

import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # (dim,)
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def yarn_mscale(factor, mscale):
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def rope_tables(c, n_pos, dtype):
    """cos, sin of shape (n_pos, qk_rope_head_dim/2), computed in float64. Plain RoPE, or
    DeepSeek YaRN when rope_scaling is set (only to check this file against the fixtures;
    the default model uses plain RoPE)."""
    d, base = c["qk_rope_head_dim"], c["rope_theta"]
    i = torch.arange(0, d // 2, dtype=torch.float64)
    inv_freq = base ** (-2 * i / d)
    amplitude = 1.0
    rs = c.get("rope_scaling")
    if rs is not None:
        if rs["type"] != "yarn":
            raise ValueError(f"rope_scaling type {rs['type']!r} not supported")
        f, orig = rs["factor"], rs["original_max_position_embeddings"]

        def cd(r):
            return d * math.log(orig / (2 * math.pi * r)) / (2 * math.log(base))

        low = max(math.floor(cd(rs.get("beta_fast", 32))), 0)
        high = min(math.ceil(cd(rs.get("beta_slow", 1))), d - 1)
        if low == high:
            high += 0.001
        m = 1 - ((i - low) / (high - low)).clamp(0, 1)
        inv_freq = inv_freq / f * (1 - m) + inv_freq * m
        amplitude = yarn_mscale(f, rs.get("mscale", 1)) / yarn_mscale(f, rs.get("mscale_all_dim", 0))
    angles = torch.outer(torch.arange(n_pos, dtype=torch.float64), inv_freq)
    return (angles.cos() * amplitude).to(dtype), (angles.sin() * amplitude).to(dtype)


def apply_rope_interleaved(x, cos, sin):
    """x (..., T, d): pairs (2i, 2i+1) rotate by angle pos * inv_freq[i]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.stack((y0, y1), dim=-1).flatten(-2)


class MLA(nn.Module):
    """Multi-head latent attention (DeepSeek-V2 section 2.1), computed in its naive form."""

    def __init__(self, c):
        super().__init__()
        self.n_heads = c["num_attention_heads"]
        self.nope = c["qk_nope_head_dim"]
        self.rope = c["qk_rope_head_dim"]
        self.v_dim = c["v_head_dim"]
        self.kv_lora = c["kv_lora_rank"]
        qk_head = self.nope + self.rope
        d = c["hidden_size"]
        if c["q_lora_rank"] is None:
            self.q_proj = nn.Linear(d, self.n_heads * qk_head, bias=False)  # (H*(nope+rope), d)
        else:
            self.q_a_proj = nn.Linear(d, c["q_lora_rank"], bias=False)
            self.q_a_layernorm = RMSNorm(c["q_lora_rank"], 1e-6)
            self.q_b_proj = nn.Linear(c["q_lora_rank"], self.n_heads * qk_head, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d, self.kv_lora + self.rope, bias=False)  # (kv_lora+rope, d)
        self.kv_a_layernorm = RMSNorm(self.kv_lora, 1e-6)
        self.kv_b_proj = nn.Linear(self.kv_lora, self.n_heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.v_dim, d, bias=False)  # (d, H*v)
        self.scale = qk_head ** -0.5
        rs = c.get("rope_scaling")
        if rs is not None and rs.get("mscale_all_dim"):
            self.scale *= yarn_mscale(rs["factor"], rs["mscale_all_dim"]) ** 2

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H = self.n_heads
        if hasattr(self, "q_proj"):
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, T, H, self.nope + self.rope).transpose(1, 2)          # (B, H, T, nope+rope)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        c_kv, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora, self.rope], dim=-1)
        k_pe = k_pe.view(B, 1, T, self.rope)                                 # shared by all heads
        kv = self.kv_b_proj(self.kv_a_layernorm(c_kv))
        kv = kv.view(B, T, H, self.nope + self.v_dim).transpose(1, 2)        # (B, H, T, nope+v)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        q_pe = apply_rope_interleaved(q_pe, cos, sin)
        k_pe = apply_rope_interleaved(k_pe, cos, sin)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(B, H, T, self.rope)), dim=-1)
        att = (q @ k.transpose(-1, -2)) * self.scale                         # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * self.v_dim)
        return self.o_proj(y)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, d, width):
        super().__init__()
        self.gate_proj = nn.Linear(d, width, bias=False)  # (width, d)
        self.up_proj = nn.Linear(d, width, bias=False)    # (width, d)
        self.down_proj = nn.Linear(width, d, bias=False)  # (d, width)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, d, n_experts):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_experts, d))  # (n_routed_experts, d)


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden_size"]
        self.top_k = c["num_experts_per_tok"]
        self.norm_topk_prob = c["norm_topk_prob"]
        self.scaling = c["routed_scaling_factor"]
        self.aux_alpha = c["aux_loss_alpha"]
        self.experts = nn.ModuleList(MLP(d, c["moe_intermediate_size"]) for _ in range(c["n_routed_experts"]))
        self.gate = Router(d, c["n_routed_experts"])
        self.shared_experts = MLP(d, c["moe_intermediate_size"] * c["n_shared_experts"])
        self.aux_loss = None

    def forward(self, x):
        B, T, D = x.shape
        flat = x.reshape(-1, D)
        router_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        scores = F.linear(flat.to(router_dtype), self.gate.weight.to(router_dtype)).softmax(dim=-1)
        weights, idx = torch.topk(scores, self.top_k, dim=-1)               # greedy
        if self.top_k > 1 and self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        else:
            weights = weights * self.scaling
        weights = weights.to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel():
                out.index_add_(0, tok, expert(flat[tok]) * weights[tok, slot, None])
        out = out + self.shared_experts(flat)
        if self.training and self.aux_alpha > 0:
            # seq_aux balance loss of the DeepSeek-V2 reference (MoEGate.forward, seq_aux=True)
            n_e = scores.shape[-1]
            ce = torch.zeros(B, n_e, dtype=scores.dtype, device=x.device)
            ce.scatter_add_(1, idx.view(B, -1), torch.ones(B, T * self.top_k, dtype=scores.dtype))
            ce = ce / (T * self.top_k / n_e)
            self.aux_loss = (ce * scores.view(B, T, n_e).mean(dim=1)).sum(dim=1).mean() * self.aux_alpha
        else:
            self.aux_loss = None
        return out.view(B, T, D)


class DecoderLayer(nn.Module):
    def __init__(self, c, layer, moe_class=None):
        """moe_class: the MoE of the MoE layers (default this file's softmax-routed one)."""
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = MLA(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        is_moe = (c["n_routed_experts"] and layer >= c["first_k_dense_replace"]
                  and layer % c["moe_layer_freq"] == 0)
        self.mlp = (moe_class or MoE)(c) if is_moe else MLP(c["hidden_size"], c["intermediate_size"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])  # (vocab, d)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        assert c["model_type"] == "deepseek_v2" and c["topk_method"] == "greedy"
        assert c["scoring_func"] == "softmax"
        self.config = c
        self.model = Backbone(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)  # (vocab, d)

    def init_weights(self, generator):
        """Normal(0, initializer_range) matrices, ones for norms; output projections scaled
        by 1/sqrt(2 * n_layers) (GPT-2) so the residual stream starts near unit scale."""
        std = self.config["initializer_range"]
        out_std = std / math.sqrt(2 * self.config["num_hidden_layers"])
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    p.normal_(0.0, out_std, generator=generator)
                else:
                    p.normal_(0.0, std, generator=generator)

    def forward(self, ids):
        """ids (B, T) int64 at positions 0..T-1 -> logits (B, T, vocab), aux loss or None."""
        T = ids.shape[1]
        x = self.model.embed_tokens(ids)
        cos, sin = rope_tables(self.config, T, x.dtype)
        aux = None
        for layer in self.model.layers:
            x = layer(x, cos, sin)
            if isinstance(layer.mlp, MoE) and layer.mlp.aux_loss is not None:
                aux = layer.mlp.aux_loss if aux is None else aux + layer.mlp.aux_loss
        return self.lm_head(self.model.norm(x)), aux

    def router_gaps(self, ids):
        """Smallest gap between the k-th and (k+1)-th router score over all MoE layers and
        tokens of one forward pass: how close the engine is to picking another expert."""
        gaps = []
        hooks = []

        def hook(mod, inp, _out):
            flat = inp[0].reshape(-1, inp[0].shape[-1]).to(torch.float64)
            s = F.linear(flat, mod.gate.weight.to(torch.float64)).softmax(-1)
            top = torch.topk(s, mod.top_k + 1, dim=-1).values
            gaps.append((top[:, mod.top_k - 1] - top[:, mod.top_k]).min().item())

        for layer in self.model.layers:
            if isinstance(layer.mlp, MoE):
                hooks.append(layer.mlp.register_forward_hook(hook))
        try:
            with torch.no_grad():
                self(ids)
        finally:
            for h in hooks:
                h.remove()
        return min(gaps)


# ---- safetensors (BF16), written and read with struct + json -------------------------

def bf16_round(t):
    """float tensor -> the nearest BF16 values (round to nearest even), as float32."""
    return t.detach().to(torch.float32).to(torch.bfloat16).to(torch.float32)


def save_safetensors_bf16(path, state, keep_f32=lambda name: False):
    """Writes {name: tensor} as BF16 safetensors (F32 where keep_f32(name)), names sorted,
    header padded to 8 bytes."""
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(state):
        t = state[name].detach().to(torch.float32).contiguous()
        if keep_f32(name):
            dtype, raw = "F32", t.numpy().astype("<f4").tobytes()
        else:
            dtype, raw = "BF16", t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def load_safetensors(path):
    """Reads a safetensors file of BF16/F32 tensors -> {name: float32 tensor} (exact)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        buf = data[base + lo:base + hi]
        if info["dtype"] == "BF16":
            u16 = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32)
        elif info["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype="<f4").copy()
        else:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {info['dtype']}")
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def read_checkpoint(folder):
    """An HF-layout folder (config.json + model.safetensors, or shards listed in
    model.safetensors.index.json) -> (config, {name: float32 tensor})."""
    with open(f"{folder}/config.json") as f:
        cfg = json.load(f)
    index = f"{folder}/model.safetensors.index.json"
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    state = {}
    for shard in shards:
        state.update(load_safetensors(f"{folder}/{shard}"))
    return cfg, state


def load_model(folder, dtype=torch.float32):
    """An HF-layout deepseek_v2 folder -> model in eval mode."""
    cfg, state = read_checkpoint(folder)
    model = DeepseekV2ForCausalLM(cfg)
    model.load_state_dict(state, strict=True)
    return model.to(dtype).eval()


@torch.no_grad()
def greedy_reference(model, prompt, n_gen):
    """Fixture-style reference: prompt logits (P, V), n_gen greedy ids and the logits after
    feeding each of them (n_gen, V). Each decode row comes from a full forward over
    prompt + ids so far, which equals the KV-cached incremental step exactly in real
    arithmetic (float64 here)."""
    ids = list(prompt)
    logits = model(torch.tensor([ids]))[0][0]
    prompt_logits = logits
    gen, decode_rows = [], []
    nxt = int(torch.argmax(logits[-1]))
    for _ in range(n_gen):
        gen.append(nxt)
        ids.append(nxt)
        row = model(torch.tensor([ids]))[0][0][-1]
        decode_rows.append(row)
        nxt = int(torch.argmax(row))
    return prompt_logits, gen, torch.stack(decode_rows)


@torch.no_grad()
def sample(model, prompt, n_max, eos_id, temperature, top_k, generator):
    """Top-k / temperature sampling until eos_id or n_max new tokens; returns new ids."""
    ids = list(prompt)
    out = []
    for _ in range(n_max):
        logits = model(torch.tensor([ids[-model.config["max_position_embeddings"]:]]))[0][0, -1]
        logits = logits.to(torch.float64) / temperature
        vals, cand = torch.topk(logits, top_k)
        nxt = int(cand[torch.multinomial(vals.softmax(-1), 1, generator=generator)])
        if nxt == eos_id:
            break
        out.append(nxt)
        ids.append(nxt)
    return out
