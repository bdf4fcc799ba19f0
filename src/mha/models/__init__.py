"""Models whose heads the book studies: MiniLM, SmolLM2, the attention-only transformer, examples.

:mod:`mha.models.minilm` loads the pretrained encoder and :mod:`mha.models.minilm_heads`
holds the experiments on its heads, :mod:`mha.models.minilm_onnx` exports its attention
to ONNX for the live model in the reader's browser; :mod:`mha.models.smollm2` loads the
pretrained decoder (rotary positions, grouped-query attention, a key/value cache) and
:mod:`mha.models.smollm2_heads` the experiments on its heads, :mod:`mha.models.smollm2_latent`
the same decoder converted to latent attention;
:mod:`mha.models.attention_only` is the small attention-only transformer that
:mod:`mha.training` trains; :mod:`mha.models.examples` holds the worked examples.
"""
