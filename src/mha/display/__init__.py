"""Display: Markdown tables and messages, shapes, and the figures of every chapter.

:mod:`mha.display.formatting` renders tables and messages; :mod:`mha.display.shapes` the shapes of
each step; :mod:`mha.display.plotting` draws attention weights and curves, and
:mod:`mha.display.diagrams` the layer's diagrams and the tiles of tiled attention.
"""
