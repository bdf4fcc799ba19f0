"""Detectors: what a head does, as a number.

:mod:`mha.detectors.patterns` scores attention patterns (previous token, induction, syntax
arcs, ...); :mod:`mha.detectors.circuits` scores a head from its weights and values (value
norms, QK score terms, OV copying).
"""
