"""Core: a layer's parameters, their packing, the key/value cache, masks and rotary positions.

The private modules here hold what every other group shares: argument checks
(``_validate``), the NumPy array kind and the one tensor-to-NumPy conversion
(``_np_checks``), the overflow bounds and the float64 overflow locator (``_overflow``), the
grouped-query reshapes (``_groups``) and general tools (``_tools``).
"""
