"""Family D: draft sampling and tree expansion .

Contracts and portable references live together: each ``_<op>_reference`` function is the op's
portable provider (and the provider signature); each public op is made by ``define_op`` from its
contract, which validates and dispatches.

Randomness (§P rule g): providers never take a ``torch.Generator``. The contracts of ``fast_sample``
and ``sample_draft_proposal`` draw the Exp(1) noise of the exponential race as a ``[B, V]`` fp32
tensor, ``torch.empty((B, V), dtype=float32, device=probs.device).exponential_(generator=generator)``
(torch's default generator of that device when None), and pass it to the provider: every provider
returns the same sample for the same noise. With ``seeds=`` and ``positions=`` instead, no generator is
touched: the noise is the keyed draws of ``keyed.py``, computed by the provider from each row's key,
so a request's sample depends on its key alone (not on the batch, a graph replay or the vendor).
"""

from .draft import fast_sample, fast_topk, renorm_draft_probs, sample_draft_proposal, select_top_k_tokens
from .keyed import ACCEPT_COIN, DRAFT_PROPOSAL, FINAL_COIN, keyed_uniform
from .topk1 import (
    TargetVerifyTopk1Output,
    draft_extend_topk1_postprocess,
    draft_topk1_postprocess,
    target_verify_topk1_postprocess,
)

__all__ = [
    "ACCEPT_COIN",
    "DRAFT_PROPOSAL",
    "FINAL_COIN",
    "TargetVerifyTopk1Output",
    "draft_extend_topk1_postprocess",
    "draft_topk1_postprocess",
    "fast_sample",
    "fast_topk",
    "keyed_uniform",
    "renorm_draft_probs",
    "sample_draft_proposal",
    "select_top_k_tokens",
    "target_verify_topk1_postprocess",
]
