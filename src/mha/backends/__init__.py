"""Backends: one multi-head attention in NumPy and in PyTorch, with the same names.

:mod:`mha.backends.np_backend` and :mod:`mha.backends.torch_backend` are the two
implementations: NumPy computes every ``form``, PyTorch all but the tiled one (each module's
``FORMS``); :mod:`mha.backends.tiled` is the NumPy tiled form (online softmax);
:mod:`mha.backends.module` wraps the PyTorch one in an ``nn.Module``.
"""
