"""``spec_hal.ops``: every public op, by family.

Device ops dispatch on the device of their tensor arguments to the provider bound for that device;
host ops are plain functions. Each family module holds its ops' contracts and portable references.
"""

from . import grammar, host, index, kv, mamba, renorm, sampling, simulated, tree
from .grammar import *  # noqa: F403  (F: grammar masks over draft trees)
from .host import *  # noqa: F403  (H: token maps, stream recording)
from .index import *  # noqa: F403  (A: KV cache-location index plumbing)
from .kv import *  # noqa: F403  (B: KV movement)
from .mamba import *  # noqa: F403  (G: mamba / linear-attention state commit)
from .renorm import *  # noqa: F403  (D7: top-k / top-p renormalisation before sampling verify)
from .sampling import *  # noqa: F403  (D: draft sampling and tree expansion)
from .simulated import *  # noqa: F403  (E: simulated acceptance)
from .tree import *  # noqa: F403  (C: tree build / verify / accept)

__all__ = [
    name
    for module in (index, kv, tree, sampling, renorm, simulated, grammar, mamba, host)
    for name in module.__all__
]
