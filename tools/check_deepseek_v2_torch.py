#!/usr/bin/python3
"""Holds tools/deepseek_v2_torch.py and tools/deepseek_v3_torch.py (the forward pass the
default model is trained and referenced with) to the shared fixtures' reference logits, so
"the training framework's own forward" is known to follow the same DeepSeek semantics as the
engine.

  tools/check_deepseek_v2_torch.py [FIXTURES_DIR]   (default: $DSV_FIXTURES or ../shared/fixtures)

Checks every deepseek_v2 fixture with topk_method greedy and every unquantized deepseek_v3
fixture (noaux_tc routing): prompt logits and decode logits
within 1e-4 max abs (float64 math vs float32-stored references), greedy ids identical.
Exit status 1 on any failure.
"""

import json
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v2_torch as ds  # noqa: E402
import deepseek_v3_torch as ds3  # noqa: E402

TOLERANCE = 1e-4


def check(folder):
    with open(f"{folder}/config.json") as f:
        cfg = json.load(f)
    v2 = cfg["model_type"] == "deepseek_v2" and cfg["topk_method"] == "greedy"
    v3 = cfg["model_type"] == "deepseek_v3" and "quantization_config" not in cfg
    if not (v2 or v3):
        return None
    model = ds3.load_model(folder, torch.float64)
    with open(f"{folder}/ref/prompt_ids.json") as f:
        prompt = json.load(f)
    with open(f"{folder}/ref/generated_ids.json") as f:
        want_gen = json.load(f)
    vocab = cfg["vocab_size"]
    want_logits = np.fromfile(f"{folder}/ref/logits.f32", dtype="<f4").reshape(-1, vocab)
    want_dec = np.fromfile(f"{folder}/ref/decode_logits.f32", dtype="<f4").reshape(-1, vocab)
    logits, gen, dec = ds.greedy_reference(model, prompt, len(want_gen))
    err_p = float(np.abs(logits.numpy() - want_logits).max())
    err_d = float(np.abs(dec.numpy() - want_dec).max())
    ok = err_p <= TOLERANCE and err_d <= TOLERANCE and gen == want_gen
    print(f"{'OK' if ok else 'NOT OK'} {os.path.basename(folder)}: prompt max abs {err_p:.2e}, "
          f"decode max abs {err_d:.2e}, greedy ids {'identical' if gen == want_gen else 'differ'}")
    return ok


def main():
    torch.set_num_threads(1)
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "DSV_FIXTURES", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures"))
    models = os.path.join(root, "models")
    results = [check(os.path.join(models, name)) for name in sorted(os.listdir(models))
               if os.path.isdir(os.path.join(models, name))]
    passed = sum(r is True for r in results)
    failed = sum(r is False for r in results)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
