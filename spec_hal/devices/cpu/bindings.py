"""CPU bindings. The portable references are vectorised torch, already the CPU implementation of
every op (the bench compares them with per-request loops); a CPU-specific provider exists only where
knowing the data on the host pays: the ragged copies of family A (``index``) and the top-k
threshold of ``top_k_renorm_prob`` (``renorm``), and numpy's unsigned words for the Philox draws of
``keyed_uniform`` (``keyed``)."""

from . import index, keyed, renorm


def register() -> None:
    index.register()
    keyed.register()
    renorm.register()
