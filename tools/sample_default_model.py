#!/usr/bin/python3
"""Samples from the default model with the PyTorch forward (tools/deepseek_v3_torch.py), to
see what the engine's output should look like.

  tools/sample_default_model.py [--model models/default] [--seed 1] [-n 3] "And God said"
  tools/sample_default_model.py --chat "Tell me about the sea."

<s> + the prompt (with --chat: <s> + the chat template's rendering of one user message),
then top-k 40 / temperature 0.8 sampling (generation_config.json) until </s> or
--max-tokens.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deepseek_v2_torch as ds  # noqa: E402
import deepseek_v3_torch as ds3  # noqa: E402
import kjv_chat  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prompt")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "models", "default"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-n", type=int, default=3, help="number of samples")
    ap.add_argument("--max-tokens", type=int, default=120)
    ap.add_argument("--chat", action="store_true", help="send the prompt as a user chat message")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(args.model, "generation_config.json")) as f:
        gen = json.load(f)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "tokenizer.model"))
    model = ds3.load_model(args.model)
    text = kjv_chat.render_prompt(args.prompt) if args.chat else args.prompt
    prompt = [gen["bos_token_id"]] + sp.encode(text)
    g = torch.Generator().manual_seed(args.seed)
    for _ in range(args.n):
        out = ds.sample(model, prompt, args.max_tokens, gen["eos_token_id"], gen["temperature"], gen["top_k"], g)
        print(sp.decode(out) if args.chat else sp.decode(prompt[1:] + out))


if __name__ == "__main__":
    main()
