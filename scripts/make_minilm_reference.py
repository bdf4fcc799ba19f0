"""Compute reference outputs of all-MiniLM-L6-v2 with Hugging Face ``transformers``, once.

``tests/test_pretrained.py`` checks that :mod:`mha.models.minilm` (this package's attention,
loaded with the same weights) reproduces these attention probabilities and hidden states.
``transformers`` is NOT a dependency of the project: it is needed only to run this script,
for example from a throw-away install directory::

    d=$(mktemp -d)
    .venv/bin/pip install --target "$d" transformers
    PYTHONPATH="$d" .venv/bin/python scripts/make_minilm_reference.py

(remove the numpy, safetensors and tokenizers that pip puts in ``$d`` first if they are
newer than the project's). The reference model is ``BertModel`` in eager attention,
evaluation mode (no dropout), float32, on a padded batch of two short sentences, so the
padding mask is tested too. The result is small (about 100 KB): some layers' attention
and hidden states.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tokenizers
import torch
import transformers
from transformers import BertModel

from mha.models.minilm import MODEL_SHA256, model_dir, sha256_of

SENTENCES = [
    "The keys to the cabinet are on the table.",
    "Attention heads specialise.",
]
ATTENTION_LAYERS = [0, 2, 5]  # which layers' attention probabilities to store
HIDDEN_LAYERS = [0, 1, 3, 6]  # which hidden states (0 = embeddings, 6 = last layer)
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "minilm_reference.npz"


def main() -> None:
    root = model_dir()
    if sha256_of(root / "model.safetensors") != MODEL_SHA256:
        raise SystemExit("model.safetensors does not have the expected SHA-256")
    tok = tokenizers.Tokenizer.from_file(str(root / "tokenizer.json"))
    tok.no_truncation()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(SENTENCES)
    input_ids = torch.tensor([e.ids for e in enc])  # (B, L)
    attention_mask = torch.tensor([e.attention_mask for e in enc])  # (B, L), 1 = real token

    model = BertModel.from_pretrained(str(root), attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_attentions=True,
            output_hidden_states=True,
        )
    np.savez_compressed(
        OUT,
        sentences=np.array(SENTENCES),
        input_ids=input_ids.numpy(),
        attention_mask=attention_mask.numpy().astype(bool),
        attention_layers=np.array(ATTENTION_LAYERS),
        attentions=np.stack([out.attentions[i].numpy() for i in ATTENTION_LAYERS]),
        hidden_layers=np.array(HIDDEN_LAYERS),
        hidden_states=np.stack([out.hidden_states[i].numpy() for i in HIDDEN_LAYERS]),
        versions=np.array(
            [f"transformers {transformers.__version__}", f"torch {torch.__version__}"]
        ),
    )
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
