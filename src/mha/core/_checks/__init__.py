"""The checks: every argument and result check of ``mha``, in one private layer.

Every public function of ``mha`` checks its arguments first, and refuses bad input with a
``ValueError`` (a shape or value) or a ``TypeError`` (a kind or dtype) that names the
argument, the rule and what it got; a refused call changes no state. The checks live here,
in the order they build on each other:

- :mod:`~mha.core._checks.arguments`: one argument at a time: flags, counts, sizes, seeds,
  devices, alignments, lengths, ranks, dtypes and mask shapes. Works on any array. Its second
  half checks an argument and hands it back as the value to compute with (``size``,
  ``number``, ``seed``, ``items``, ...: Python ints and floats, lists), for the modules that
  measure heads, train models and count costs.
- :mod:`~mha.core._checks.arrays`: :class:`~mha.core._checks.arrays.ArrayKind`, a backend's
  description of its arrays, and the checks that read values through it (finiteness, largest
  magnitudes) for a whole call of ``softmax``, ``scaled_dot_product_attention`` and
  ``layer_norm``.
- :mod:`~mha.core._checks.overflow`: bounds on every stage of a computation from its inputs'
  magnitudes, the range checks of results, and the float64 search for a stage that
  overflowed.
- :mod:`~mha.core._checks.numpy_arrays`: NumPy's ``ArrayKind``, the one conversion of a
  tensor or a sequence to NumPy (``as_numpy``), and the checks that hand an argument back as
  a float64, int64 or boolean NumPy array (``float_array``, ``int_array``, ``bool_array``).
- :mod:`~mha.core._checks.layer`: a call of ``multi_head_attention``: its arguments (a
  key/value cache's included), its result's range, and the staging that makes a call with a
  cache atomic.
- :mod:`~mha.core._checks.latent`: the same for a call of ``multi_head_latent_attention``
  (its latent cache, its two routes, rotary positions on decoupled or rebuilt keys).

PyTorch's ``ArrayKind`` (how a tensor's values are read, under ``torch.func`` too) sits beside
the PyTorch backend, in :mod:`mha.backends.torch_checks`, with the public switch that turns
those reads off (``value_checks``).
"""
