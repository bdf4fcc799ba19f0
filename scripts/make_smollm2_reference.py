"""Compute reference outputs of SmolLM2-135M-Instruct with Hugging Face ``transformers``, once.

``tests/test_smollm2.py`` checks that :mod:`mha.models.smollm2` (this package's attention and
rotary positions, on the same GGUF file) reproduces these attention weights, logits, token
ids and greedy continuations. ``transformers`` reads the GGUF file by its own route: it
dequantises the tensors, undoes llama.cpp's permutation of the query and key rows, and runs
its ``LlamaForCausalLM`` with the ``rotate_half`` pairing. It is NOT a dependency of the
project; run this script from a throw-away environment outside the repository that also sees
the project's packages, for example::

    ref=$(mktemp -d)/ref-venv  # any folder outside the repository
    python3 -m venv "$ref"
    echo "$PWD/.venv/lib/python3.11/site-packages" \\
        > "$ref/lib/python3.11/site-packages/project.pth"
    "$ref/bin/pip" install transformers accelerate
    "$ref/bin/python" scripts/make_smollm2_reference.py

The reference model is dequantised at load time (``GgufConfig(dequantize=True)``, by
``transformers``' own dequantiser) into plain float64 layers, and runs with eager attention
(which returns the weights), so the stored values carry float64's rounding, not float32's;
they are stored in float32. The
file is small (a few hundred KB): the attention weights of a few layers, and the logits of
every position for a subset of the vocabulary (seeded random ids and each position's five
largest).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

from mha.models.minilm import sha256_of
from mha.models.smollm2 import GGUF_SHA256, gguf_path

PROMPTS = [
    "The keys to the cabinet are on the table.",
    "In 2024, 12 apples cost $3.50 - or so I'm told!",
    "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n",
]
ATTENTION_LAYERS = [0, 1, 14, 29]  # which layers' attention weights to store
RANDOM_IDS = 400  # logits stored for these seeded random ids, and each position's top 5
NEW_TOKENS = 12  # greedy continuation of every prompt
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "smollm2_reference.npz"


def main() -> None:
    path = gguf_path()
    if sha256_of(path) != GGUF_SHA256:
        raise SystemExit(f"{path} does not have the expected SHA-256")
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent),
        gguf_file=path.name,
        attn_implementation="eager",
        dtype=torch.float64,
        quantization_config=GgufConfig(dequantize=True),  # plain float64 layers, no kernels
    ).eval()
    rng = np.random.default_rng(0)
    random_ids = rng.choice(model.config.vocab_size, RANDOM_IDS, replace=False)
    arrays: dict[str, np.ndarray] = {}
    for i, prompt in enumerate(PROMPTS):
        ids = torch.tensor([tokenizer(prompt).input_ids])  # (1, L)
        with torch.no_grad():
            out = model(ids, output_attentions=True)
            continued = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
        logits = out.logits[0].numpy()  # (L, V)
        top = np.argsort(logits, axis=-1)[:, -5:]  # (L, 5)
        vocab = np.union1d(random_ids, top)
        arrays[f"input_ids_{i}"] = ids[0].numpy()
        arrays[f"attentions_{i}"] = np.stack(
            [out.attentions[layer][0].numpy() for layer in ATTENTION_LAYERS]
        ).astype(np.float32)  # (layers, H, L, L)
        arrays[f"vocab_{i}"] = vocab
        arrays[f"logits_{i}"] = logits[:, vocab].astype(np.float32)  # (L, len(vocab))
        arrays[f"continued_{i}"] = continued[0].numpy()
    np.savez_compressed(
        OUT,
        prompts=np.array(PROMPTS),
        attention_layers=np.array(ATTENTION_LAYERS),
        versions=np.array(
            [f"transformers {transformers.__version__}", f"torch {torch.__version__}"]
        ),
        **arrays,
    )
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
