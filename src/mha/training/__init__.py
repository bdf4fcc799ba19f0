"""Training: tasks, training runs and their store, ablation and interpretation of heads.

:mod:`mha.training.tasks` makes the data; :mod:`mha.training.runs` trains the
attention-only transformer and keeps runs, :mod:`mha.training.digit_sums` trains it on the
digit-sum task; :mod:`mha.training.ablation` switches heads off
and measures what they did.
"""
