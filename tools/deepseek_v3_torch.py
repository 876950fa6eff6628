"""A plain PyTorch DeepSeek-V3 (deepseek_v3) causal LM with one multi-token-prediction
(MTP) module, built on the DeepSeek-V2 pieces of deepseek_v2_torch.py (MLA, SwiGLU, RMSNorm,
RoPE/YaRN, safetensors). Used only to train and check the bundled default model; nothing
here runs at serving time. Semantics (shared/fixtures/models/README.md, DeepSeek-V3
technical report arXiv:2412.19437 sections 2.1.2 and 2.2):

  * MoE router (topk_method noaux_tc, scoring_func sigmoid): s = sigmoid(x W^T) (float32 or
    better); choice = s + e_score_correction_bias; group score = sum of the two largest
    choice values in each of n_group groups; keep topk_group groups; top-k of choice among
    their experts; weights = s of the chosen experts, divided by their sum (+1e-20) if
    norm_topk_prob, times routed_scaling_factor. The bias only chooses, never weighs.
  * Auxiliary-loss-free balancing: after each optimizer step the bias of an expert moves by
    bias_update_speed towards balance (down if it got more than the mean load, up if less),
    plus the small sequence-wise balance loss (aux_loss_alpha) of eq. 17-20.
  * MTP module k=1, HF layout model.layers.{num_hidden_layers}.*: for position i,
    x = eh_proj([enorm(Emb(t_{i+1})); hnorm(h_i)]) (embedding half first, as vLLM and
    SGLang), h_i the main model's last hidden state after model.norm; one decoder block
    (MLA + MoE) over positions 0..T-2; logits = shared_head.head(shared_head.norm(out))
    predict t_{i+2}. The embedding and head are the main model's (shared while training,
    written as copies: embed_tokens.weight, shared_head.head.weight).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import deepseek_v2_torch as v2


class NoauxRouter(nn.Module):
    def __init__(self, d, n_experts):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_experts, d))                 # (n_routed_experts, d)
        self.register_buffer("e_score_correction_bias", torch.zeros(n_experts))  # (n_routed_experts,)


def noaux_choice(scores, bias, n_group, topk_group, top_k):
    """scores (N, E) sigmoid -> chosen expert ids (N, top_k) by score + bias, group-limited."""
    choice = scores + bias
    N, E = choice.shape
    grouped = choice.view(N, n_group, E // n_group)
    group_score = grouped.topk(min(2, E // n_group), dim=-1).values.sum(-1)   # (N, n_group)
    keep_groups = group_score.topk(topk_group, dim=-1).indices
    group_mask = torch.zeros_like(group_score).scatter_(1, keep_groups, 1.0)
    expert_mask = group_mask.repeat_interleave(E // n_group, dim=1).bool()
    masked = choice.masked_fill(~expert_mask, float("-inf"))
    return masked.topk(top_k, dim=-1).indices, choice, group_score


class NoauxMoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden_size"]
        self.top_k = c["num_experts_per_tok"]
        self.n_group, self.topk_group = c["n_group"], c["topk_group"]
        self.norm_topk_prob = c["norm_topk_prob"]
        self.scaling = c["routed_scaling_factor"]
        self.aux_alpha = c["aux_loss_alpha"]
        self.experts = nn.ModuleList(v2.MLP(d, c["moe_intermediate_size"]) for _ in range(c["n_routed_experts"]))
        self.gate = NoauxRouter(d, c["n_routed_experts"])
        self.shared_experts = v2.MLP(d, c["moe_intermediate_size"] * c["n_shared_experts"])
        self.aux_loss = None
        self.load = None  # tokens per expert in the last training forward

    def forward(self, x):
        B, T, D = x.shape
        flat = x.reshape(-1, D)
        router_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        scores = torch.sigmoid(F.linear(flat.to(router_dtype), self.gate.weight.to(router_dtype)))
        bias = self.gate.e_score_correction_bias.to(router_dtype)
        with torch.no_grad():
            idx, _, _ = noaux_choice(scores, bias, self.n_group, self.topk_group, self.top_k)
        weights = scores.gather(1, idx)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        weights = (weights * self.scaling).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel():
                out.index_add_(0, tok, expert(flat[tok]) * weights[tok, slot, None])
        out = out + self.shared_experts(flat)
        if self.training:
            n_e = scores.shape[-1]
            self.load = torch.bincount(idx.reshape(-1), minlength=n_e).to(torch.float32)
            # sequence-wise balance loss (eq. 17-20): f_i * P_i with normalised affinities
            hits = torch.zeros(B, n_e, dtype=scores.dtype)
            hits.scatter_add_(1, idx.view(B, -1), torch.ones(B, T * self.top_k, dtype=scores.dtype))
            f = hits * (n_e / (self.top_k * T))
            p = (scores / scores.sum(-1, keepdim=True)).view(B, T, n_e).mean(dim=1)
            self.aux_loss = (f * p).sum(dim=1).mean() * self.aux_alpha
        else:
            self.aux_loss, self.load = None, None
        return out.view(B, T, D)

    @torch.no_grad()
    def update_bias(self, speed):
        """Auxiliary-loss-free balancing: b_i += speed * sign(mean load - load_i)."""
        if self.load is not None:
            self.gate.e_score_correction_bias += speed * torch.sign(self.load.mean() - self.load)


class DecoderLayer(v2.DecoderLayer):
    def __init__(self, c, layer):
        super().__init__(c, layer, NoauxMoE)


class SharedHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = v2.RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)  # (vocab, d)


class MTPLayer(DecoderLayer):
    """The MTP module in DeepSeek's HF layout: a decoder block plus enorm, hnorm, eh_proj,
    its own (copied) embed_tokens and shared_head."""

    def __init__(self, c, layer):
        super().__init__(c, layer)
        d = c["hidden_size"]
        self.embed_tokens = nn.Embedding(c["vocab_size"], d)       # (vocab, d), = model.embed_tokens
        self.enorm = v2.RMSNorm(d, c["rms_norm_eps"])
        self.hnorm = v2.RMSNorm(d, c["rms_norm_eps"])
        self.eh_proj = nn.Linear(2 * d, d, bias=False)              # (d, 2d): [embedding | hidden]
        self.shared_head = SharedHead(c)                            # head = lm_head

    def predict(self, h, next_ids, cos, sin):
        """h (B, T, d) main hidden after model.norm, next_ids (B, T) the token after each
        position -> logits (B, T, vocab) for the token after next."""
        x = self.eh_proj(torch.cat((self.enorm(self.embed_tokens(next_ids)), self.hnorm(h)), dim=-1))
        x = super().forward(x, cos, sin)
        return self.shared_head.head(self.shared_head.norm(x))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        n = c["num_hidden_layers"]
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])  # (vocab, d)
        self.layers = nn.ModuleList([DecoderLayer(c, i) for i in range(n)] +
                                    [MTPLayer(c, n + k) for k in range(c.get("num_nextn_predict_layers", 0))])
        self.norm = v2.RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class DeepseekV3ForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        assert c["model_type"] == "deepseek_v3" and c["topk_method"] == "noaux_tc"
        assert c["scoring_func"] == "sigmoid" and c.get("num_nextn_predict_layers", 0) <= 1
        self.config = c
        self.n_layers = c["num_hidden_layers"]
        self.model = Backbone(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)  # (vocab, d)
        if self.mtp is not None:  # DeepSeek-V3 section 2.2: embedding and output head shared
            self.mtp.embed_tokens.weight = self.model.embed_tokens.weight
            self.mtp.shared_head.head.weight = self.lm_head.weight

    @property
    def mtp(self):
        """The MTP module (model.layers[num_hidden_layers]) or None; a property, so its
        parameters are named only by their HF names."""
        return self.model.layers[self.n_layers] if len(self.model.layers) > self.n_layers else None

    # Normal(0, initializer_range) matrices, ones for norms, output projections scaled by
    # 1/sqrt(2 * n_layers); the router biases are buffers and start at zero.
    init_weights = v2.DeepseekV2ForCausalLM.init_weights

    def moe_layers(self):
        return [layer.mlp for layer in self.model.layers if isinstance(layer.mlp, NoauxMoE)]

    def forward(self, ids, with_mtp=False):
        """ids (B, T) at positions 0..T-1 -> logits (B, T, vocab), aux loss or None, and
        with_mtp the MTP logits (B, T-1, vocab) predicting ids[:, i+2] at position i."""
        T = ids.shape[1]
        x = self.model.embed_tokens(ids)
        cos, sin = v2.rope_tables(self.config, T, x.dtype)
        for layer in self.model.layers[:self.n_layers]:
            x = layer(x, cos, sin)
        h = self.model.norm(x)
        logits = self.lm_head(h)
        mtp_logits = None
        if with_mtp:
            mtp_logits = self.mtp.predict(h[:, :-1], ids[:, 1:], cos[:T - 1], sin[:T - 1])
        aux = [m.aux_loss for m in self.moe_layers() if m.aux_loss is not None]
        aux = sum(aux) if aux else None
        return (logits, aux, mtp_logits) if with_mtp else (logits, aux)

    @torch.no_grad()
    def update_router_biases(self, speed):
        for m in self.moe_layers():
            m.update_bias(speed)

    def router_gaps(self, ids):
        """Smallest margin, over the main model's MoE layers and the tokens of one forward
        pass, of a routing decision: kept vs dropped group score, and k-th vs (k+1)-th
        choice value among the kept groups' experts."""
        gaps = []
        hooks = []

        def hook(mod, inp, _out):
            flat = inp[0].reshape(-1, inp[0].shape[-1]).to(torch.float64)
            s = torch.sigmoid(F.linear(flat, mod.gate.weight.to(torch.float64)))
            bias = mod.gate.e_score_correction_bias.to(torch.float64)
            idx, choice, gscore = noaux_choice(s, bias, mod.n_group, mod.topk_group, mod.top_k)
            if mod.topk_group < mod.n_group:
                g = gscore.topk(mod.topk_group + 1, dim=-1).values
                gaps.append((g[:, -2] - g[:, -1]).min().item())
            kept = choice.clone()
            per = choice.shape[1] // mod.n_group
            keep_groups = gscore.topk(mod.topk_group, dim=-1).indices
            mask = torch.zeros_like(gscore).scatter_(1, keep_groups, 1.0).repeat_interleave(per, 1).bool()
            kept = kept.masked_fill(~mask, float("-inf"))
            top = kept.topk(mod.top_k + 1, dim=-1).values
            gaps.append((top[:, mod.top_k - 1] - top[:, mod.top_k]).min().item())

        for layer in self.model.layers[:self.n_layers]:
            if isinstance(layer.mlp, NoauxMoE):
                hooks.append(layer.mlp.register_forward_hook(hook))
        try:
            with torch.no_grad():
                self(ids)
        finally:
            for h in hooks:
                h.remove()
        return min(gaps)


def load_model(folder, dtype=torch.float32):
    """An HF-layout deepseek_v3 or deepseek_v2 folder -> model in eval mode."""
    cfg, state = v2.read_checkpoint(folder)
    model = DeepseekV3ForCausalLM(cfg) if cfg["model_type"] == "deepseek_v3" else v2.DeepseekV2ForCausalLM(cfg)
    model.load_state_dict(state, strict=True)
    return model.to(dtype).eval()


@torch.no_grad()
def mtp_reference(model, ids):
    """MTP logits (T-1, vocab) over a sequence: row i predicts ids[i+2] from the main
    model's hidden at i and ids[i+1]."""
    return model(torch.tensor([ids]), with_mtp=True)[2][0]
