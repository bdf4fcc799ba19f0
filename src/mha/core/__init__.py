"""Core: a layer's parameters, their packing, the caches, mask rules, rotary positions.

What every other group shares is private here: the checks (the package ``_checks``, one
layer of argument and result checks; its docstring maps it), the grouped-query reshapes
(``_groups``) and general tools (``_tools``).
"""
