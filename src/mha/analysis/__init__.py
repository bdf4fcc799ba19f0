"""Analysis: the rank of attention, the subspaces of its heads, the low-rank bottleneck, and
keys and values factored through a latent."""
