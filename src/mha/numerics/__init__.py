"""Numerics: how far two computations of the same attention may differ, and why.

:mod:`mha.numerics.tolerance` holds every error bound the book and the tests assert with;
:mod:`mha.numerics.precision` shows rounding at work; :mod:`mha.numerics.backward` computes
the gradients by hand, and :mod:`mha.numerics.gradcheck` holds them to autograd's within
the bound of :func:`mha.numerics.tolerance.gradient_tolerance`.
"""
