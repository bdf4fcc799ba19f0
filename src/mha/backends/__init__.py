"""Backends: one multi-head attention in NumPy and in PyTorch, with the same names.

:mod:`mha.backends.np_backend` and :mod:`mha.backends.torch_backend` are the two
implementations: NumPy computes every ``form``, PyTorch all but the tiled one (each module's
``FORMS``). In each, a form is one function of pure math, and ``multi_head_attention``
checks its arguments, runs the form and checks the result's range.
:mod:`mha.backends.tiled` is the NumPy tiled form (online softmax);
:mod:`mha.backends.latent` is multi-head latent attention, by its two routes, for arrays and
tensors alike;
:mod:`mha.backends.torch_checks` is how the PyTorch backend reads tensors' values for its
checks (and switches those reads off); :mod:`mha.backends.cpu_shortcuts` holds the PyTorch
backend's two CPU shortcuts and their switch; :mod:`mha.backends.module` wraps the PyTorch
backend in an ``nn.Module``.
"""
