#!/usr/bin/python3
"""Trains dsvisor's bundled default model (models/default/).

A small deepseek_v3 model (MLA, MoE with a shared expert and auxiliary-loss-free noaux_tc
routing, one multi-token-prediction module) on the King James Version that Debian ships,
with a SentencePiece BPE tokenizer trained by Debian's spm_train, taught the chat template's
turn format on passage pairs from the same text (kjv_chat.py). Needs the optional training
packages (`scripts/bootstrap.sh --with-training`); serving never does.

  tools/train_default_model.py --out models/default            # full run (~30 min, 1 thread)
  tools/train_default_model.py --out /tmp/d-smoke --steps 40     # smoke run
  tools/train_default_model.py --out models/default --ref-only   # rewrite ref/ from the files

Stages: corpus (kjv_corpus.py, kjv_chat.py) -> tokenizer (spm_train) -> training (fp32,
AdamW, seeded)
-> export (HF folder, BF16 safetensors) -> ref/ (fixture-style reference logits computed in
float64 from the exported BF16 weights). The same seed on the same torch build gives the
same files.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy/torch load the BLAS

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v2_torch as ds  # noqa: E402
import deepseek_v3_torch as ds3  # noqa: E402
import kjv_chat  # noqa: E402
import kjv_corpus  # noqa: E402

VOCAB_SIZE = 4000
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
CONTEXT = 256          # training window = max_position_embeddings
REF_PROMPT_TOKENS = 64
REF_GEN_TOKENS = 16

MAX_REPLY_TOKENS = 40   # a chat reply fits the README's 48-token request with room to spare
CHAT_SHARE = 0.5        # about this share of the training verses also appear as a chat turn
MTP_WEIGHT = (0.3, 0.1)  # lambda of the MTP loss: first 70 % of the steps, then the rest
BIAS_UPDATE_SPEED = 1e-3  # gamma of the auxiliary-loss-free balancing

# Every key a DeepSeek-V3 Hugging Face config.json carries (same set as the fixtures').
CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekV3Config",
        "AutoModel": "modeling_deepseek.DeepseekV3Model",
        "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
    },
    "aux_loss_alpha": 0.0001,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "ep_size": 1,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 192,
    "initializer_range": 0.02,
    "intermediate_size": 512,
    "kv_lora_rank": 64,
    "max_position_embeddings": CONTEXT,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 160,
    "moe_layer_freq": 1,
    "n_group": 4,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 6,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 4,
    "num_key_value_heads": 6,
    "num_nextn_predict_layers": 1,
    "pretraining_tp": 1,
    "q_lora_rank": None,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000,
    "routed_scaling_factor": 1.0,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 2,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.3",
    "use_cache": True,
    "v_head_dim": 32,
    "vocab_size": VOCAB_SIZE,
}

# The turn format the model is trained on (kjv_chat.py): <s><|user|>message<|assistant|>reply</s>.
# A system message is rendered as a user turn (the model has no other use for it); earlier
# assistant turns end with </s>, as the training replies do.
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}"
                 "{% if message['role'] == 'assistant' %}" + kjv_chat.ASSISTANT +
                 "{{ message['content'] }}{{ eos_token }}"
                 "{% else %}" + kjv_chat.USER + "{{ message['content'] }}{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}" + kjv_chat.ASSISTANT + "{% endif %}")


KJV_COPYRIGHT = """\
    The copyright for the King James Version text of the Bible is expired since
    the  translation was done in 1611 under King James the first of Great
    Britain."""

README = """\
# dsvisor default model: a small DeepSeek-V3 trained on the King James Version

The model dsvisor serves when no other model is given. No weights can be downloaded on the
build machines, so the project trains its own: a {parameters}-parameter `deepseek_v3` model
with the things that make DeepSeek different, multi-head latent attention, a mixture of
experts with a shared expert and auxiliary-loss-free (`noaux_tc`) routing, and one
multi-token-prediction (MTP) module, trained on the King James Bible. It writes
KJV-flavoured English and answers a chat message with the kind of passage that follows it in
the text; it knows nothing else.

## Files (Hugging Face layout; the engine converts it like any real checkpoint)

| file | what |
| --- | --- |
| `config.json` | `model_type` deepseek_v3, `DeepseekV3ForCausalLM`, every DeepSeek-V3 config key |
| `model.safetensors` | BF16 weights (router biases F32), HF tensor names, [out, in] matrices; the MTP module is `model.layers.{num_hidden_layers}.*` |
| `generation_config.json` | `<s>`={bos_token_id}, `</s>`={eos_token_id}; sampling: temperature 0.8, top-k 40 |
| `tokenizer.model` | SentencePiece BPE, {vocab_size} pieces, with the chat role markers |
| `tokenizer_config.json` | BOS/EOS and the chat template |
| `training.json` | the numbers of the run that produced these files |
| `ref/` | reference logits on held-out text, in the layout of `shared/fixtures/models`, and the MTP module's |

## Architecture

| | |
| --- | --- |
| layers | {num_hidden_layers} (layer 0 dense SwiGLU, width {intermediate_size}; layers 1-{last_layer} MoE) + 1 MTP module |
| hidden size | {hidden_size}, RMSNorm eps {rms_norm_eps} |
| attention | MLA, {num_attention_heads} heads, q_lora_rank null (q_proj), kv_lora_rank {kv_lora_rank}, qk_nope {qk_nope_head_dim} / qk_rope {qk_rope_head_dim} / v {v_head_dim}; plain RoPE, theta {rope_theta}, interleaved pairs |
| MoE | {n_experts} routed experts of width {moe_intermediate_size}, top-{num_experts_per_tok}; sigmoid scoring, `noaux_tc`: chosen by score + `e_score_correction_bias` among the best {topk_group} of {n_group} groups, weighted by the scores renormalised (norm_topk_prob true) times routed_scaling_factor {routed_scaling_factor}; {n_shared_experts} shared expert |
| MTP | `num_nextn_predict_layers` 1: `eh_proj`([`enorm`(embedding of token i+1); `hnorm`(main hidden at i after `model.norm`)]), one MLA + MoE block, `shared_head` (norm + copy of lm_head) predicting token i+2; `embed_tokens` is a copy of the main embedding ({mtp_parameters} parameters of its own) |
| vocabulary | {vocab_size}, untied lm_head |
| context | {max_position_embeddings} tokens (the training window) |

## Data

The King James Version (1611) as Debian's `bible-kjv-text` package ships it (read with
`bible` from `bible-kjv`): 31102 verses. Training: Genesis to Jude, each verse one sequence
`<s> verse </s>`, plus {chat_turns} chat turns drawn from the same books
(`tools/kjv_chat.py`): a user message, then as the assistant's reply the verse that follows
in the text (two when it is short; at most {max_reply_tokens} tokens with `</s>`). The
messages are made of the corpus's own words: the verse before the reply, an imperative or
question opener ("Tell me of", "What is", ...) with a phrase of the reply, a few words of the
verse before, or a salutation ("Peace be unto you"). {train_tokens} tokens in all
({chat_tokens} in chat turns); the user turns' tokens are not training targets. Held out:
Revelation, the last book ({held_out_tokens} tokens), never seen by the tokenizer or the
model. From `/usr/share/doc/bible-kjv-text/copyright`:

{kjv_copyright}

## Tokenizer and chat template

`spm_train` (Debian `sentencepiece`) on the training verses: BPE, {vocab_size} pieces, byte
fallback, split digits, identity normalisation, dummy prefix (Llama settings); `<unk>`=0,
`<s>`=1, `</s>`=2, and the role markers `{user_marker}` and `{assistant_marker}` as
user-defined pieces (always one token each). Encoding adds `<s>`. The chat template renders
`<s>{user_marker}message{assistant_marker}`; the model replies and ends with `</s>`. Earlier
assistant turns end with `</s>`; a system message is rendered as a user turn.

## Training

`tools/train_default_model.py --out models/default` (seed {seed}; needs
`scripts/bootstrap.sh --with-training`): PyTorch {torch}, float32, one thread, AdamW
(lr {lr}, betas 0.9/0.95, weight decay 0.1, warm-up then cosine to 10 %), {steps} steps of
{batch} windows x {context} tokens starting at a sequence's `<s>`. Loss: next-token
cross-entropy + {mtp_weight_early} (first 70 % of the steps, then {mtp_weight_late}) x the MTP
module's cross-entropy on the token after next (DeepSeek-V3 report, section 2.2) + the
sequence-wise balance loss (alpha {aux_loss_alpha}); after each step every router bias moves
by {bias_update_speed} towards balanced expert loads (auxiliary-loss-free balancing). Final
training loss {final_train_loss} nats/token (MTP {final_train_mtp_loss}). Weights rounded to
BF16 for export. The same seed on the same torch build gives byte-identical files.

Held-out (Revelation) perplexity with the exported BF16 weights: **{ppl:.1f}**
({held_out_loss_bf16} nats/token); a unigram model of the training verses (add-one smoothing)
gets {unigram_ppl:.1f}. `bench/default_model_ppl.py` re-measures both. The MTP module on the
same text: {held_out_mtp_loss_bf16} nats/token for the token after next, and its argmax equals
the main model's next argmax at {mtp_agreement_percent:.1f} % of the positions (the greedy
acceptance rate of one MTP draft).

## Reference and test

`ref/` holds `<s>` + the start of Revelation (whole words, at most 64 tokens), the logits of the
training code's forward pass on them computed in float64 from the BF16 weights, 16 greedy
ids and the logits of each decode step (`manifest.json` has the text, the smallest greedy
margin and router gap), and `mtp_logits.f32`, the MTP module's logits over prompt + greedy
ids. The ctest `test-default-model` runs `dsvisor logits` on this folder and requires max abs
error <= 1e-3 and identical greedy ids; `test-default-chat-replies` sends fifty short chat
messages through `dsvisor start`. The same PyTorch code reproduces the shared DeepSeek-V2 and
V3 fixtures' references (`tools/check_deepseek_v2_torch.py`).

## License

Weights and tokenizer: CC0 1.0 (see LICENSE). Training text: the KJV, out of copyright.
"""

LICENSE_HEAD = """\
dsvisor default model (model.safetensors, tokenizer.model and the JSON files beside them)

Trained by the dsvisor project on the King James Version of the Bible (1611), as shipped by
Debian's bible-kjv-text package. /usr/share/doc/bible-kjv-text/copyright says of the text:

{kjv_copyright}

The dsvisor project dedicates these model files to the public domain under CC0 1.0
Universal, whose text follows.

------------------------------------------------------------------------------------------

"""


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- tokenizer ------------------------------------------------------------------------

def train_tokenizer(train_texts, work):
    """spm_train BPE with Llama-style settings (identity normalisation, dummy prefix,
    byte fallback, split digits) and the chat role markers as user-defined pieces
    -> work/tokenizer.model."""
    corpus = os.path.join(work, "train.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(train_texts) + "\n")
    # paths relative to the work dir: the .model records them, and stays the same wherever it is
    cmd = ["spm_train", "--input=train.txt", "--model_prefix=tokenizer",
           "--model_type=bpe", f"--vocab_size={VOCAB_SIZE}", "--character_coverage=1.0",
           "--byte_fallback=true", "--split_digits=true", "--allow_whitespace_only_pieces=true",
           "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
           "--add_dummy_prefix=true", f"--unk_id={UNK_ID}", f"--bos_id={BOS_ID}",
           f"--eos_id={EOS_ID}", "--pad_id=-1", "--num_threads=1",
           f"--user_defined_symbols={kjv_chat.USER},{kjv_chat.ASSISTANT}"]
    with open(os.path.join(work, "spm_train.log"), "w") as logf:
        subprocess.run(cmd, check=True, stdout=logf, stderr=subprocess.STDOUT, cwd=work)
    return os.path.join(work, "tokenizer.model")


def encode_stream(sp, texts):
    """Verses -> one int64 stream [<s> verse </s> <s> verse </s> ...]."""
    out = []
    for ids in sp.encode(texts):
        out.append(BOS_ID)
        out.extend(ids)
        out.append(EOS_ID)
    return np.asarray(out, dtype=np.int64)


def chat_pairs(sp, verses, seed):
    """kjv_chat pairs whose reply fits MAX_REPLY_TOKENS (with its </s>)."""
    rng = np.random.default_rng(seed)
    return kjv_chat.pairs(verses, rng, CHAT_SHARE, lambda reply: len(sp.encode(reply)) + 1 <= MAX_REPLY_TOKENS)


def encode_training_stream(sp, train_texts, pairs, seed):
    """Verses and chat turns, shuffled as documents, -> (stream, targets mask). A verse is
    <s> verse </s>; a chat turn is <s> + the template's rendering of the user message +
    reply </s>, encoded as the engine encodes the rendered prompt, then the reply. The
    mask drops the targets inside the user turn (the model learns to answer, not to ask)."""
    docs = [[BOS_ID] + ids + [EOS_ID] for ids in sp.encode(train_texts)]
    masks = [[1] * len(d) for d in docs]
    prompts = sp.encode([kjv_chat.render_prompt(p) for p, _ in pairs])
    replies = sp.encode([r for _, r in pairs])
    for prompt, reply in zip(prompts, replies):
        docs.append([BOS_ID] + prompt + reply + [EOS_ID])
        # mask[j] says whether token j is a training target; the user turn's tokens are not
        masks.append([1] + [0] * len(prompt) + [1] * (len(reply) + 1))
    order = np.random.default_rng(seed).permutation(len(docs))
    stream = np.fromiter((t for i in order for t in docs[i]), dtype=np.int64)
    mask = np.fromiter((m for i in order for m in masks[i]), dtype=np.bool_)
    return stream, mask


# ---- training -------------------------------------------------------------------------

def batches(stream, mask, batch, context, rng):
    """Windows of context+1 tokens starting at a document's <s>, as at inference, with
    the mask of their targets."""
    starts = np.flatnonzero(stream[:len(stream) - context - 1] == BOS_ID)
    offs = np.arange(context + 1)
    while True:
        at = rng.choice(starts, batch)[:, None] + offs
        w = torch.from_numpy(stream[at])
        yield w[:, :-1], w[:, 1:], torch.from_numpy(mask[at[:, 1:]])


@torch.no_grad()
def eval_loss(model, stream, context):
    """Mean next-token cross-entropy over consecutive windows of the stream, targets that
    are <s> excluded (a <s> always follows </s>)."""
    model.eval()
    total, count = 0.0, 0
    for lo in range(0, len(stream) - 1, context):
        w = torch.from_numpy(stream[lo:lo + context + 1])[None]
        logits, _ = model(w[:, :-1])
        y = w[:, 1:].reshape(-1)
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y, reduction="none")
        keep = y != BOS_ID
        total += nll[keep].sum().item()
        count += int(keep.sum())
    model.train()
    return total / count


def masked_ce(logits, targets, keep):
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    keep = keep.reshape(-1)
    return (nll * keep).sum() / keep.sum().clamp(min=1)


def train(model, stream, mask, held, args):
    """AdamW on next-token cross-entropy + the sequence-wise balance loss + lambda times the
    MTP module's cross-entropy on the token after next (DeepSeek-V3 eq. 24-25, depth 1);
    after each step the router biases move towards balanced expert loads."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, eps=1e-8)
    rng = np.random.default_rng(args.seed)
    data = batches(stream, mask, args.batch, CONTEXT, rng)
    warmup = max(1, args.steps // 20)
    t0 = time.time()
    model.train()
    history, mtp_history = [], []
    for step in range(args.steps):
        lr = args.lr * (step + 1) / warmup if step < warmup else \
            args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup))))
        for g in opt.param_groups:
            g["lr"] = lr
        mtp_weight = MTP_WEIGHT[0] if step < 0.7 * args.steps else MTP_WEIGHT[1]
        x, y, keep = next(data)
        logits, aux, mtp_logits = model(x, with_mtp=True)
        ce = masked_ce(logits, y, keep)
        mtp_ce = masked_ce(mtp_logits, y[:, 1:], keep[:, 1:])
        loss = ce + mtp_weight * mtp_ce + (aux if aux is not None else 0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        model.update_router_biases(BIAS_UPDATE_SPEED)
        history.append(ce.item())
        mtp_history.append(mtp_ce.item())
        if step % args.log_every == 0 or step == args.steps - 1:
            el = time.time() - t0
            tok_s = (step + 1) * args.batch * CONTEXT / el
            log(f"step {step}/{args.steps} lr {lr:.2e} loss {np.mean(history[-args.log_every:]):.4f} "
                f"mtp {np.mean(mtp_history[-args.log_every:]):.4f} "
                f"aux {aux.item() if aux is not None else 0:.5f} {tok_s:.0f} tok/s {(step + 1) / el:.3f} steps/s "
                f"elapsed {el/60:.1f} min")
        if args.eval_every and step and step % args.eval_every == 0:
            log(f"step {step} held-out loss {eval_loss(model, held, CONTEXT):.4f}")
    return (float(np.mean(history[-args.log_every:])), float(np.mean(mtp_history[-args.log_every:])),
            (time.time() - t0) / 60)


# ---- export ---------------------------------------------------------------------------

def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def keeps_f32(name):
    """The router biases stay F32, as DeepSeek-V3 ships them; everything else is BF16."""
    return name.endswith("e_score_correction_bias")


def export(model, tok_path, out, stats):
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), CONFIG)
    write_json(os.path.join(out, "generation_config.json"), {
        "_from_model_config": True, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
        "do_sample": True, "temperature": 0.8, "top_k": 40,
        "transformers_version": CONFIG["transformers_version"]})
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
        "clean_up_tokenization_spaces": False, "legacy": True,
        "model_max_length": CONTEXT, "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizer", "chat_template": CHAT_TEMPLATE})
    shutil.copyfile(tok_path, os.path.join(out, "tokenizer.model"))
    ds.save_safetensors_bf16(os.path.join(out, "model.safetensors"), model.state_dict(), keeps_f32)
    write_json(os.path.join(out, "training.json"), stats)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(README.format(**stats, **CONFIG, kjv_copyright=KJV_COPYRIGHT,
                              last_layer=CONFIG["num_hidden_layers"] - 1,
                              n_experts=CONFIG["n_routed_experts"], max_reply_tokens=MAX_REPLY_TOKENS,
                              user_marker=kjv_chat.USER, assistant_marker=kjv_chat.ASSISTANT,
                              mtp_weight_early=MTP_WEIGHT[0], mtp_weight_late=MTP_WEIGHT[1],
                              bias_update_speed=BIAS_UPDATE_SPEED,
                              mtp_agreement_percent=100 * stats["held_out_mtp_greedy_agreement"],
                              ppl=math.exp(stats["held_out_loss_bf16"]),
                              unigram_ppl=math.exp(stats["held_out_unigram_loss"])))
    with open("/usr/share/common-licenses/CC0-1.0") as f:
        cc0 = f.read()
    with open(os.path.join(out, "LICENSE"), "w") as f:
        f.write(LICENSE_HEAD.format(kjv_copyright=KJV_COPYRIGHT) + cc0)


@torch.no_grad()
def eval_mtp(model, stream, context):
    """The MTP module on held-out windows: mean cross-entropy of the token after next (<s>
    targets excluded) and how often its argmax equals the main model's argmax one position
    later (the greedy acceptance rate of a one-token MTP draft)."""
    model.eval()
    total, count, agree = 0.0, 0, 0
    for lo in range(0, len(stream) - 2, context):
        w = torch.from_numpy(stream[lo:lo + context + 1])[None]
        if w.shape[1] < 3:
            break
        logits, _, mtp = model(w[:, :-1], with_mtp=True)
        y = w[0, 2:]
        nll = F.cross_entropy(mtp[0], y, reduction="none")
        keep = y != BOS_ID
        total += nll[keep].sum().item()
        count += int(keep.sum())
        agree += int((mtp[0].argmax(-1) == logits[0, 1:].argmax(-1))[keep].sum())
    model.train()
    return total / count, agree / count


def unigram_loss(stream, held):
    """Mean NLL of held-out tokens (<s> targets excluded, as in eval_loss) under training-set
    token frequencies with add-one smoothing."""
    counts = np.bincount(stream[stream != BOS_ID], minlength=VOCAB_SIZE).astype(np.float64)
    logp = np.log((counts + 1) / (counts.sum() + VOCAB_SIZE))
    targets = held[1:]
    return float(-logp[targets[targets != BOS_ID]].mean())


def write_ref(out, sp):
    """ref/ in the fixtures' layout, from the exported BF16 weights widened to float64."""
    model = ds3.load_model(out, torch.float64)
    _, held = kjv_corpus.split_verses()
    words = " ".join(held).split(" ")
    # the longest run of whole words from the book's start that fits, so encoding
    # prompt_text gives exactly prompt_ids[1:] (the engine's tokenizer is checked on it)
    n = 1
    while len(sp.encode(" ".join(words[:n + 1]))) <= REF_PROMPT_TOKENS - 1:
        n += 1
    prompt_text = " ".join(words[:n])
    prompt = [BOS_ID] + sp.encode(prompt_text)
    logits, gen, dec = ds.greedy_reference(model, prompt, REF_GEN_TOKENS)
    ref = os.path.join(out, "ref")
    os.makedirs(ref, exist_ok=True)
    write_json(os.path.join(ref, "prompt_ids.json"), prompt)
    write_json(os.path.join(ref, "generated_ids.json"), gen)
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(ref, "logits.f32"))
    dec.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(ref, "decode_logits.f32"))
    mtp = ds3.mtp_reference(model, prompt + gen)
    mtp.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(ref, "mtp_logits.f32"))
    rows = torch.cat([logits[-1:], dec[:-1]])
    top2 = torch.topk(rows, 2, dim=-1).values
    full = torch.tensor([prompt + gen[:-1]])
    manifest = {
        "description": "reference data for the bundled default model (KJV-trained deepseek_v3 with one MTP module)",
        "model_type": "deepseek_v3",
        "weights": {"files": ["model.safetensors"],
                    "reference_math": "weights are used exactly as stored (BF16 values widened to float64)"},
        "reference": {"compute_dtype": "float64 (outputs stored as float32)", "batch": 1,
                      "positions": "0..n_prompt-1 for the prompt, continuing for decode steps",
                      "attention_mask": "causal, no padding",
                      "prompt": "<s> + the held-out book (Revelation) from its first verse, "
                                f"as many whole words as fit in {REF_PROMPT_TOKENS} tokens",
                      "prompt_text": prompt_text},
        "files": {
            "prompt_ids.json": {"dtype": "int", "shape": [len(prompt)]},
            "logits.f32": {"dtype": "float32 little-endian", "shape": [len(prompt), VOCAB_SIZE],
                           "order": "row-major"},
            "generated_ids.json": {"dtype": "int", "shape": [REF_GEN_TOKENS]},
            "decode_logits.f32": {"dtype": "float32 little-endian", "shape": [REF_GEN_TOKENS, VOCAB_SIZE],
                                  "order": "row-major"},
            "mtp_logits.f32": {"dtype": "float32 little-endian",
                               "shape": [len(prompt) + REF_GEN_TOKENS - 1, VOCAB_SIZE], "order": "row-major",
                               "meaning": "the MTP module (model.layers.N) over prompt + generated ids: row i "
                                          "from the main model's hidden state at position i (after model.norm) "
                                          "and the id at i+1, predicting the id at i+2"}},
        "n_prompt": len(prompt),
        "vocab_size": VOCAB_SIZE,
        "diagnostics": {
            "generated_text": sp.decode(gen),
            "min_greedy_top1_top2_margin": float((top2[:, 0] - top2[:, 1]).min()),
            "min_router_selection_gap": model.router_gaps(full),
            "logit_std": float(logits.std()),
        },
    }
    write_json(os.path.join(ref, "manifest.json"), manifest)
    log(f"ref: prompt {len(prompt)} tokens, greedy {sp.decode(gen)!r}, "
        f"margin {manifest['diagnostics']['min_greedy_top1_top2_margin']:.4f}, "
        f"router gap {manifest['diagnostics']['min_router_selection_gap']:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="model folder to write")
    ap.add_argument("--work", default="/tmp/dsv-default-model", help="scratch dir (corpus, checkpoint)")
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--steps", type=int, default=520)
    ap.add_argument("--batch", type=int, default=6)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--ref-only", action="store_true", help="only rewrite OUT/ref from OUT's files")
    ap.add_argument("--export-only", action="store_true",
                    help="skip training: export WORK/model-fp32.pt (+ WORK/train-stats.json) again")
    args = ap.parse_args()

    import sentencepiece as spm
    torch.set_num_threads(1)  # the build machines' cores are shared
    if args.ref_only:
        write_ref(args.out, spm.SentencePieceProcessor(model_file=os.path.join(args.out, "tokenizer.model")))
        return

    os.makedirs(args.work, exist_ok=True)
    train_texts, held_texts = kjv_corpus.split_verses()
    log(f"corpus: {len(train_texts)} training verses, {len(held_texts)} held out (Revelation)")
    tok_path = train_tokenizer(train_texts, args.work)
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    assert sp.vocab_size() == VOCAB_SIZE and sp.bos_id() == BOS_ID and sp.eos_id() == EOS_ID
    plain = encode_stream(sp, train_texts)
    held = encode_stream(sp, held_texts)
    train_verses = [v for v in kjv_corpus.read_verses() if v[0] not in kjv_corpus.HELD_OUT_BOOKS]
    pairs = chat_pairs(sp, train_verses, args.seed)
    stream, mask = encode_training_stream(sp, train_texts, pairs, args.seed)
    log(f"tokens: {len(stream)} training ({len(plain)} in verses, {len(stream) - len(plain)} in "
        f"{len(pairs)} chat turns), {len(held)} held out")

    torch.manual_seed(args.seed)
    model = ds3.DeepseekV3ForCausalLM(CONFIG)
    model.init_weights(torch.Generator().manual_seed(args.seed))
    n_params = sum(p.numel() for p in model.parameters())
    shared = {id(model.model.embed_tokens.weight), id(model.lm_head.weight)}
    n_mtp = sum(p.numel() for p in model.mtp.parameters() if id(p) not in shared)
    log(f"model: {n_params} parameters ({n_mtp} of them the MTP module's own)")
    ckpt = os.path.join(args.work, "model-fp32.pt")
    run_path = os.path.join(args.work, "train-stats.json")
    if args.export_only:
        model.load_state_dict(torch.load(ckpt))
        with open(run_path) as f:
            run = json.load(f)
    else:
        # the wall time is logged, not written: the files stay byte-identical on a rerun
        train_loss, mtp_loss, minutes = train(model, stream, mask, held, args)
        log(f"training took {minutes:.1f} min")
        torch.save(model.state_dict(), ckpt)
        run = {"seed": args.seed, "steps": args.steps, "batch": args.batch, "lr": args.lr,
               "final_train_loss": round(train_loss, 4), "final_train_mtp_loss": round(mtp_loss, 4)}
        write_json(run_path, run)

    with torch.no_grad():
        for name, p in model.state_dict().items():
            if not keeps_f32(name):
                p.copy_(ds.bf16_round(p))
    held_loss = eval_loss(model, held, CONTEXT)
    mtp_loss, mtp_agree = eval_mtp(model, held, CONTEXT)
    log(f"trained: final train loss {run['final_train_loss']:.4f}, held-out loss (BF16 weights) "
        f"{held_loss:.4f} (ppl {math.exp(held_loss):.2f}), MTP held-out loss {mtp_loss:.4f}, "
        f"MTP greedy agreement {mtp_agree:.3f}")
    stats = {**run, "context": CONTEXT, "parameters": n_params, "mtp_parameters": n_mtp,
             "train_tokens": int(len(stream)), "chat_turns": len(pairs),
             "chat_tokens": int(len(stream) - len(plain)), "held_out_tokens": int(len(held)),
             "held_out_loss_bf16": round(held_loss, 4),
             "held_out_mtp_loss_bf16": round(mtp_loss, 4), "held_out_mtp_greedy_agreement": round(mtp_agree, 4),
             "held_out_unigram_loss": round(unigram_loss(plain, held), 4),
             "torch": torch.__version__}
    export(model, tok_path, args.out, stats)
    write_ref(args.out, sp)
    log(f"exported {args.out}")


if __name__ == "__main__":
    main()
