#!/usr/bin/python3
"""Held-out perplexity of the bundled default model (models/default) beside a unigram
baseline, on the book it never saw in training (Revelation, KJV).

  bench/default_model_ppl.py [MODEL_DIR]        (default: models/default)

Model: the PyTorch forward of tools/deepseek_v3_torch.py on the committed BF16 weights
(float32 math), over consecutive windows of max_position_embeddings tokens of the stream
<s> verse </s> <s> verse </s> ... Unigram: training-set token frequencies with add-one
smoothing, p(t) = (count(t) + 1) / (N + V). Both score the same targets: every held-out
token except <s> (which always follows </s>). Needs the training packages
(scripts/bootstrap.sh --with-training).
"""

import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import deepseek_v3_torch as ds3  # noqa: E402
import kjv_corpus  # noqa: E402
import train_default_model as tdm  # noqa: E402


def main():
    torch.set_num_threads(1)
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "models", "default")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(folder, "tokenizer.model"))
    train_texts, held_texts = kjv_corpus.split_verses()
    train = tdm.encode_stream(sp, train_texts)
    held = tdm.encode_stream(sp, held_texts)
    vocab = sp.vocab_size()

    targets = held[1:]
    targets = targets[targets != tdm.BOS_ID]
    counts = np.bincount(train[train != tdm.BOS_ID], minlength=vocab).astype(np.float64)
    logp = np.log((counts + 1) / (counts.sum() + vocab))
    unigram_nll = float(-logp[targets].mean())

    model = ds3.load_model(folder, torch.float32)
    t0 = time.time()
    model_nll = tdm.eval_loss(model, held, model.config["max_position_embeddings"])
    seconds = time.time() - t0

    chars = sum(len(t) + 1 for t in held_texts)  # each verse plus its end
    n = len(targets)
    print(f"held-out text: Revelation (KJV), {len(held_texts)} verses, {chars} characters, {n} scored tokens")
    print(f"{'':10} {'ppl':>9} {'nats/token':>11} {'bits/char':>10}")
    for name, nll in (("model", model_nll), ("unigram", unigram_nll)):
        print(f"{name:10} {math.exp(nll):9.2f} {nll:11.4f} {nll * n / chars / math.log(2):10.3f}")
    print(f"(model forward: {seconds:.1f} s, 1 thread)")


if __name__ == "__main__":
    main()
