"""A trained two-layer attention-only model as the data of the explorable ``"induction-heads"``.

The figure runs the model of ``book/trained-heads.md`` in the reader's browser
(``mha-explore.js``: ``attention_only_model`` reads the data, ``attention_only_forward`` runs
it). :func:`decoder_data` writes the data: the sizes, the 64 characters that stand for the
token ids, the two heads the chapter measured (a previous-token head in layer 1, an induction
head in layer 2, with their scores), the settings of the task it was trained on (the figure
draws its random sequences with them, as :func:`mha.training.tasks.repeated_segments` does),
and every parameter rounded to float16 and packed in one base64 string, in the order of the
model's ``state_dict``. :func:`decoder_model` reads the
same data back into an :class:`~mha.models.attention_only.AttentionOnlyTransformer` in
float64: the model the figure computes, to which its numbers are held.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from mha.core._checks import arguments
from mha.models.attention_only import AttentionOnlyTransformer
from mha.training.runs import TrainConfig

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
"""The characters of token ids 0 to 63, in order (base64's alphabet)."""

ROLES = ("previous_token", "induction")
"""The two heads the figure shows, by role: layer 1's previous-token head, layer 2's
induction head."""

_FLOAT16_MAX = float(np.finfo(np.float16).max)


def encode(text: str) -> list[int]:
    """The token ids of ``text``, one per character of :data:`ALPHABET`.

    Args:
        text: characters of :data:`ALPHABET`.

    Returns:
        The ids, in order.

    Raises:
        TypeError: if ``text`` is not a str.
        ValueError: if a character is not in :data:`ALPHABET` (the first such is named).
    """
    text = arguments.text("text", text)
    for i, c in enumerate(text):
        if c not in ALPHABET:
            raise ValueError(
                f"text must hold only the 64 characters A-Z a-z 0-9 + /; got {c!r} at {i}"
            )
    return [ALPHABET.index(c) for c in text]


def decoder_data(
    model: AttentionOnlyTransformer,
    scores: Mapping[str, Any],
    *,
    previous_token_head: int,
    induction_head: int,
    config: TrainConfig,
) -> dict[str, Any]:
    """The figure's data: the model rounded to float16, the two heads it shows, and its task.

    Args:
        model: a trained model with two layers, multi-head attention and a vocabulary of 64.
        scores: the heads' scores, ``{"previous_token": (2, H), "induction": (2, H)}`` as
            :func:`mha.training.runs.head_scores` measures them.
        previous_token_head: the head of layer 1 the figure shows as the previous-token head.
        induction_head: the head of layer 2 it shows as the induction head.
        config: the config the model was trained with: the figure's "Repeat a random
            sequence" draws from its task, as training did.

    Returns:
        A dict that JSON can write: ``alphabet``, the sizes (``vocab_size``, ``max_len``,
        ``d_model``, ``num_heads``, ``num_layers``), ``heads`` (each role's ``layer``,
        ``head`` and ``score``), ``task`` (the config's ``min_period``, ``max_period`` and
        ``prefix_prob``; its ``seq_len`` and ``vocab_size`` are ``max_len`` and
        ``vocab_size``), ``params`` (``[name, shape]`` in order) and ``float16`` (their
        values, little-endian float16, base64).

    Raises:
        TypeError: if ``model`` is not an :class:`AttentionOnlyTransformer`, ``scores`` not a
            mapping, a head not an int, or ``config`` not a
            :class:`~mha.training.runs.TrainConfig`.
        ValueError: if the model has not two layers, a vocabulary of 64 or one key/value head
            per head; the config's ``seq_len`` and ``vocab_size`` are not the model's
            ``max_len`` and ``vocab_size``; a head is outside ``[0, H)``; a score array is
            not ``(2, H)`` or not finite; or a parameter is beyond float16's range.
    """
    arguments.instance("model", model, AttentionOnlyTransformer, "AttentionOnlyTransformer")
    V, H = model.vocab_size, model.num_heads
    if (model.num_layers, V, model.num_kv_heads) != (2, len(ALPHABET), H):
        raise ValueError(
            f"model must have 2 layers, a vocabulary of {len(ALPHABET)} and H_kv = H; got "
            f"{model.num_layers} layers, V={V}, H={H}, H_kv={model.num_kv_heads}"
        )
    arguments.instance("config", config, TrainConfig, "a TrainConfig")
    if (config.seq_len, config.vocab_size) != (model.max_len, V):
        raise ValueError(
            "config must be the model's task: seq_len = max_len and vocab_size = V; got "
            f"seq_len={config.seq_len}, vocab_size={config.vocab_size} for a model with "
            f"max_len={model.max_len}, V={V}"
        )
    if not isinstance(scores, Mapping):
        raise TypeError(f"scores must be a mapping; got {arguments.describe(scores)}")
    heads = {}
    for role, layer, head in zip(ROLES, (0, 1), (previous_token_head, induction_head), strict=True):
        head = arguments.index(f"{role}_head", head, H)
        if role not in scores:
            raise ValueError(f"scores must have {role!r}; got keys {sorted(scores)}")
        table = np.asarray(scores[role], dtype=np.float64)
        if table.shape != (2, H):
            raise ValueError(f"scores[{role!r}] must have shape (2, {H}); got {table.shape}")
        if not np.isfinite(table).all():
            raise ValueError(f"scores[{role!r}] must be finite (JSON has no NaN); got {table}")
        heads[role] = {"layer": layer, "head": head, "score": float(table[layer, head])}
    state = model.state_dict()
    values = np.concatenate([t.detach().double().flatten().numpy() for t in state.values()])
    if not np.isfinite(values).all() or np.abs(values).max() > _FLOAT16_MAX:
        raise ValueError(
            f"model's parameters must be finite and within float16's range ({_FLOAT16_MAX}); "
            f"got a largest |value| of {np.abs(values).max()}"
        )
    packed = values.astype("<f2").tobytes()
    return {
        "alphabet": ALPHABET,
        "vocab_size": V,
        "max_len": model.max_len,
        "d_model": model.embed.shape[1],
        "num_heads": H,
        "num_layers": model.num_layers,
        "heads": heads,
        "task": {
            "min_period": config.min_period,
            "max_period": config.max_period,
            "prefix_prob": config.prefix_prob,
        },
        "params": [[name, list(t.shape)] for name, t in state.items()],
        "float16": base64.b64encode(packed).decode("ascii"),
    }


def decoder_model(data: Mapping[str, Any]) -> AttentionOnlyTransformer:
    """The model of :func:`decoder_data`'s data in float64: the one the figure computes.

    Args:
        data: what :func:`decoder_data` returned (or its JSON read back).

    Returns:
        An :class:`AttentionOnlyTransformer` of dtype float64 with the float16 parameters.

    Raises:
        TypeError: if ``data`` is not a mapping.
        ValueError: if a key is missing, or the values do not fill the parameters' shapes.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a mapping; got {arguments.describe(data)}")
    needed = ("vocab_size", "max_len", "d_model", "num_heads", "num_layers", "params", "float16")
    missing = [key for key in needed if key not in data]
    if missing:
        raise ValueError(f"data must have the keys {list(needed)}; missing {missing}")
    values = np.frombuffer(base64.b64decode(data["float16"]), dtype="<f2").astype(np.float64)
    sizes = [int(np.prod(shape)) for _, shape in data["params"]]
    if sum(sizes) != values.size:
        raise ValueError(
            f"data's float16 values must fill its params ({sum(sizes)} numbers); got {values.size}"
        )
    model = AttentionOnlyTransformer(
        data["vocab_size"],
        data["max_len"],
        data["d_model"],
        data["num_heads"],
        data["num_layers"],
        dtype=torch.float64,
    )
    state, start = {}, 0
    for (name, shape), n in zip(data["params"], sizes, strict=True):
        state[name] = torch.from_numpy(values[start : start + n].reshape(shape).copy())
        start += n
    model.load_state_dict(state)
    return model


__all__ = ["ALPHABET", "ROLES", "decoder_data", "decoder_model", "encode"]
