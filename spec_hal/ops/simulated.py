"""Family E: simulated acceptance, for benchmarking speculative decoding .

sglang enables it with ``SGLANG_SIMULATE_ACC_LEN > 0``: instead of the real verify result, every
request accepts a length drawn around a target mean, so that throughput can be measured at a chosen
acceptance rate. The length is drawn on the host (:func:`sample_simulated_acc_len`); one device op
then writes the accept index and the tokens (:func:`generate_simulated_accept_index`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._constants import SIMULATED_TOKEN
from ..opdef import OpDef, define_op
from ..validation import (
    ANY_SIZE,
    check_fits_int32,
    check_index,
    check_output,
    check_positive_int,
    check_range,
    check_tensor,
    common_device,
    new_output,
    value_checks_enabled,
)

__all__ = ["generate_simulated_accept_index", "sample_simulated_acc_len"]

ACC_LEN_METHODS = ("multinomial", "match-expected")
TOKEN_MODES = ("fixed", "real-draft-token")


# --------------------------------------------------------------------------------------------------
# E1 sample_simulated_acc_len (host)


def _check_host_generator(generator: object) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    if generator.device.type != "cpu":
        raise ValueError(
            f"generator: expected a CPU generator (the length is drawn on the host), got {generator.device}"
        )


def _check_mean(mean: object) -> float:
    if isinstance(mean, bool) or not isinstance(mean, (int, float)):
        raise TypeError(f"mean: expected a float, got {type(mean).__name__}")
    if not math.isfinite(mean):
        raise ValueError(f"mean: expected a finite number, got {mean}")
    return float(mean)


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def sample_simulated_acc_len(
    mean: float, method: str, max_len: int, generator: torch.Generator | None = None
) -> int:
    """Draw one simulated accept length (drafts + bonus) in ``[1, max_len]`` on the host.

    ``"multinomial"`` (sglang's name; it is a rounded normal): ``round(clamp(mean + z, 1, max_len))``
    with ``z = torch.randn((), generator=generator)`` and round half to even. ``"match-expected"``
    (expectation ``clamp(mean, 1, max_len)`` exactly): ``m = clamp(mean, 1, max_len)``,
    ``lo = floor(m)``; if ``lo == max_len`` the result is ``lo`` without a draw, else
    ``u = torch.rand((), generator=generator)`` and the result is ``lo + 1`` if ``u < m - lo``, else
    ``lo``.

    Args:
        mean: the target mean accept length (finite).
        method: ``"multinomial"`` or ``"match-expected"``.
        max_len: the largest length, ``>= 1`` (``num_steps + 1``).
        generator: a CPU ``torch.Generator``, or None for torch's default CPU generator.

    Returns:
        The length, an int in ``[1, max_len]``.
    """
    mean = _check_mean(mean)
    _check_choice("method", method, ACC_LEN_METHODS)
    check_positive_int("max_len", max_len)
    _check_host_generator(generator)
    if method == "multinomial":
        drawn = mean + float(torch.randn((), generator=generator))
        return round(min(max(drawn, 1.0), float(max_len)))
    expected = min(max(mean, 1.0), float(max_len))
    lower = math.floor(expected)
    if lower >= max_len:
        return max_len
    coin = float(torch.rand((), generator=generator))
    return lower + 1 if coin < expected - lower else lower


# --------------------------------------------------------------------------------------------------
# E2 generate_simulated_accept_index


def _generate_simulated_accept_index_reference(
    accept_index: Tensor,
    predicts: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    target_predict: Tensor,
    accept_len: int,
    real_draft_tokens: bool,
    new_accept_index: Tensor,
) -> None:
    batch, draft_token_num = candidates.shape
    roots = accept_index[:, :1].long()
    # A -1 or out-of-range root is a masked lane: its row is left as it was.
    root_ok = (roots >= 0) & (roots < batch * draft_token_num)
    offsets = torch.arange(new_accept_index.shape[1], device=candidates.device)
    accepted_nodes = torch.where(offsets < accept_len, roots + offsets, -1)
    new_accept_index.copy_(torch.where(root_ok, accepted_nodes, new_accept_index))
    num_correct_drafts.fill_(accept_len - 1)
    if real_draft_tokens:
        node_tokens = predicts.view(batch, draft_token_num)
        node_tokens[:, : accept_len - 1] = candidates[:, 1:accept_len]
        node_tokens[:, accept_len - 1] = target_predict[:, accept_len - 1]
    else:
        predicts.fill_(SIMULATED_TOKEN)


@define_op(
    _generate_simulated_accept_index_reference,
    mutates=("predicts", "num_correct_drafts", "new_accept_index"),
    op_class="latency",
    variant=("accept_index", "candidates", "target_predict"),
)
def generate_simulated_accept_index(
    op: OpDef,
    accept_index: Tensor,
    predicts: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    target_predict: Tensor,
    num_steps: int,
    mean: float,
    method: str,
    token_mode: str,
    generator: torch.Generator | None = None,
    new_accept_index: Tensor | None = None,
) -> Tensor:
    """Replace a verify result by a simulated one where every request accepts ``L`` tokens.

    Runs after verify when simulated acceptance is on. ``L`` (drafts + bonus) is drawn on the host by
    ``sample_simulated_acc_len(mean, method, num_steps + 1, generator)`` (always, also for bs = 0);
    then one device op writes row ``b`` of ``new_accept_index`` as ``accept_index[b, 0] + [0, L)``,
    -1 after, sets every ``num_correct_drafts`` to ``L - 1`` and rewrites ``predicts``:
    ``"fixed"`` sets every entry to 100; ``"real-draft-token"`` (chains, topk = 1, so D = num_steps + 1)
    sets ``predicts[b*D + k] = candidates[b, k+1]`` for ``k < L-1`` and ``predicts[b*D + L-1] =
    target_predict[b, L-1]``, leaving the other entries untouched.

    Args:
        accept_index: ``[bs, W]`` int32/int64; only column 0 (the root's flat id, in ``[0, bs*D)``) is
            read; a row whose root is -1 is padding and its ``new_accept_index`` row is not written.
        predicts: ``[bs*D]`` int32, rewritten in place.
        num_correct_drafts: ``[bs]`` int32, rewritten in place.
        candidates: ``[bs, D]`` int32/int64 draft tokens (node 0 = root).
        target_predict: ``[bs, D]`` int32/int64 target tokens per node.
        num_steps: S, ``>= 1``.
        mean, method: as :func:`sample_simulated_acc_len`.
        token_mode: ``"fixed"`` or ``"real-draft-token"``.
        generator: CPU ``torch.Generator`` for the host draw, or None (torch's default CPU generator).
        new_accept_index: optional output ``[bs, S+1]`` int32.

    Returns:
        ``new_accept_index``.
    """
    check_index("accept_index", accept_index, ndim=2)
    batch = accept_index.shape[0]
    if accept_index.shape[1] == 0:
        raise ValueError("accept_index: expected at least one column (the root)")
    check_index("candidates", candidates, shape=(batch, ANY_SIZE))
    draft_token_num = candidates.shape[1]
    if draft_token_num == 0:
        raise ValueError("candidates: expected D >= 1 columns (node 0 is the root)")
    check_index("target_predict", target_predict, shape=(batch, draft_token_num))
    check_tensor("predicts", predicts, dtype=torch.int32, shape=(batch * draft_token_num,))
    check_tensor("num_correct_drafts", num_correct_drafts, dtype=torch.int32, shape=(batch,))
    check_positive_int("num_steps", num_steps)
    _check_mean(mean)
    _check_choice("method", method, ACC_LEN_METHODS)
    real_draft_tokens = _check_choice("token_mode", token_mode, TOKEN_MODES) == "real-draft-token"
    if real_draft_tokens and draft_token_num != num_steps + 1:
        raise ValueError(
            f"candidates: token_mode 'real-draft-token' needs a chain (topk 1) with D = num_steps + 1 = "
            f"{num_steps + 1} columns, got {draft_token_num}"
        )
    device = common_device(
        accept_index=accept_index,
        predicts=predicts,
        num_correct_drafts=num_correct_drafts,
        candidates=candidates,
        target_predict=target_predict,
    )
    _check_host_generator(generator)
    width = num_steps + 1
    if new_accept_index is None:
        new_accept_index = new_output((batch, width), torch.int32, device)
    else:
        check_output(
            "new_accept_index", new_accept_index, dtype=torch.int32, device=device, shape=(batch, width)
        )
    if value_checks_enabled(device):
        check_range("accept_index", accept_index[:, 0], 0, batch * draft_token_num, allow=-1)
        if real_draft_tokens:  # tokens copied into int32 predicts
            check_fits_int32("candidates", candidates[:, 1:])
            check_fits_int32("target_predict", target_predict)
    accept_len = sample_simulated_acc_len(mean, method, width, generator)
    if batch > 0:
        op.dispatch(
            device, accept_index, predicts, num_correct_drafts, candidates, target_predict,
            accept_len, real_draft_tokens, new_accept_index,
        )  # fmt: skip
    return new_accept_index
