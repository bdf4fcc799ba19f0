"""Cost and measurement: FLOPs, bytes and IO by arithmetic, and time and memory by measuring.

:mod:`mha.cost.arithmetic`, :mod:`mha.cost.latent_arithmetic` (latent attention) and
:mod:`mha.cost.tiled_io` count; :mod:`mha.cost.measure` holds the
generic probes (FLOP and operator counters, peak memory, timers); :mod:`mha.cost.timings`
and :mod:`mha.cost.peak_memory` are the attention experiments built on them.
"""
