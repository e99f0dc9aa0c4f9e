"""Family G: hybrid linear-attention (mamba / GDN / KDA) state commit after verify .

During TARGET_VERIFY the model writes the recurrent state after every draft step into scratch
(``intermediate_ssm``, ``intermediate_conv_windows``) and leaves the persistent cache lines alone.
After acceptance the state after the last accepted step is copied into each request's cache line
(and, with prefix-cache tracking, the state at the last ``track_interval`` boundary into a tracking
line). G1 computes those steps, G2 copies the states, G3 commits over a :class:`MambaVerifyStates`:
when it computes the steps itself it is one device op (``commit_mamba_states_after_verify``,
portable reference = G1's then G2's; one launch on the Triton vendors), otherwise G2 (after G1 for
a step the caller left out).

Contracts and portable references live together: each ``_<op>_reference`` function is the op's
portable provider (and the provider signature); each public op is made by ``define_op`` from its
contract, which validates and dispatches.

The stages are modules: ``steps`` (G1), ``scatter`` (G2) and ``commit`` (G3).
"""

from .commit import MambaVerifyStates, commit_mamba_states_after_verify
from .scatter import scatter_mamba_states_after_mtp_verify
from .steps import verify_commit_step_indices

__all__ = [
    "MambaVerifyStates",
    "verify_commit_step_indices",
    "scatter_mamba_states_after_mtp_verify",
    "commit_mamba_states_after_verify",
]
