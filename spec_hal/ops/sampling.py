"""Family D: draft sampling and tree expansion (spec ops.md §D).

Contracts and portable references live together: the ``_portable`` functions decorated with
``define_op`` are the provider signatures; the public functions validate and dispatch.

Randomness (§P rule g): providers never take a ``torch.Generator``. The contracts of ``fast_sample``
and ``sample_draft_proposal`` draw the Exp(1) noise of the exponential race as a ``[B, V]`` fp32
tensor, ``torch.empty((B, V), dtype=float32, device=probs.device).exponential_(generator=generator)``
(torch's default generator of that device when None), and pass it to the provider: every provider
returns the same sample for the same noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..opdef import define_op
from ..validation import (
    FLOAT_DTYPES,
    check_fits_int32,
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    check_tensor,
    common_device,
    new_output,
    value_checks_enabled,
)

__all__ = [
    "TargetVerifyTopk1Output",
    "draft_extend_topk1_postprocess",
    "draft_topk1_postprocess",
    "fast_sample",
    "fast_topk",
    "renorm_draft_probs",
    "sample_draft_proposal",
    "select_top_k_tokens",
    "target_verify_topk1_postprocess",
]

#: Exp(1) noise is clamped to this so that a zero draw cannot divide by zero (D2).
_FLOAT32_TINY = torch.finfo(torch.float32).tiny
#: D6: a NaN logit ranks as this value (below every finite logit, above -inf).
_NAN_LOGIT = -1e30
#: Token every simulated predict entry gets when no real token is asked for (D6, E2).
SIMULATED_TOKEN = 100


# --------------------------------------------------------------------------------------------------
# Shared helpers


def _index_dtypes(*positions: int) -> Callable[..., Hashable]:
    """A ``variant``: the dtypes of the provider arguments at ``positions`` (None when absent)."""

    def variant(*args: Any) -> Hashable:
        return tuple(None if args[p] is None else args[p].dtype for p in positions)

    return variant


OutputSpec = tuple[str, Sequence[int], torch.dtype]


def _outputs(out: object, specs: Sequence[OutputSpec | None], device: torch.device) -> list[Tensor | None]:
    """The outputs of a bare ``out=`` tuple (flattened), checked against ``specs``; allocated when None.

    A None spec is an output the call does not produce (e.g. ``hidden`` without hidden states): its
    ``out`` entry must be None too.
    """
    if out is None:
        return [None if spec is None else new_output(spec[1], spec[2], device) for spec in specs]
    if not isinstance(out, (tuple, list)) or len(out) != len(specs):
        raise ValueError(f"out: expected a tuple of {len(specs)} entries shaped like the returns")
    outputs: list[Tensor | None] = []
    for position, (given, spec) in enumerate(zip(out, specs, strict=True)):
        if spec is None:
            if given is not None:
                raise ValueError(f"out[{position}]: expected None, this call has no such output")
            outputs.append(None)
        else:
            name, shape, dtype = spec
            outputs.append(check_output(name, given, dtype=dtype, device=device, shape=shape))
    return outputs


def _check_generator(generator: object, device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    if device.type != "meta" and generator.device.type != device.type:
        raise ValueError(
            f"generator: expected a generator of the tensors' device {device}, got one of {generator.device}"
        )


def _exponential_noise(
    shape: Sequence[int], device: torch.device, generator: torch.Generator | None
) -> Tensor:
    """Exp(1) noise of the exponential race, fp32, drawn from ``generator`` (default one when None)."""
    noise = torch.empty(tuple(shape), dtype=torch.float32, device=device)
    if generator is None or device.type == "meta":  # meta tensors hold no data: there is nothing to draw
        return noise.exponential_()
    return noise.exponential_(generator=generator)


def _exponential_race(probs: Tensor, exp_noise: Tensor, num_samples: int) -> Tensor:
    """``[B, n]`` int64 draws without replacement from each row of ``probs`` (need not sum to 1).

    argmax_i p_i / E_i with E_i ~ Exp(1) picks i with probability p_i / sum(p); an all-zero row gives
    index 0 (argmax returns the first maximum).
    """
    scores = probs.float() / exp_noise.clamp_min(_FLOAT32_TINY)
    if num_samples == 1:
        return scores.argmax(dim=-1, keepdim=True)
    return torch.topk(scores, num_samples, dim=-1).indices


def _tempered_softmax(logits: Tensor, temperatures: Tensor | None, out_probs: Tensor) -> None:
    """``out_probs = softmax(logits / temperatures)`` over the vocabulary, computed in fp32."""
    scaled = logits.float() if temperatures is None else logits.float() / temperatures
    out_probs.copy_(torch.softmax(scaled, dim=-1))


def _argmax_nan_low(logits: Tensor) -> Tensor:
    """D6's argmax ``[..., 1]`` int64: compared in fp32, NaN ranks as -1e30, ties go to the lowest index."""
    # nan_to_num is one pass (where(isnan) is two); infinities must stay infinite.
    values = torch.nan_to_num(logits.float(), nan=_NAN_LOGIT, posinf=math.inf, neginf=-math.inf)
    return values.max(dim=-1, keepdim=True).indices  # max reports the first maximum


def _check_temperatures(temperatures: object, batch: int) -> Tensor:
    return check_tensor("temperatures", temperatures, dtype=torch.float32, shape=(batch, 1))


def _check_positive_temperatures(temperatures: Tensor, device: torch.device) -> None:
    # A zero temperature would make the whole row NaN (sglang maps greedy requests to 1.0).
    if value_checks_enabled(device) and temperatures.numel() and bool((temperatures <= 0).any()):
        raise ValueError(f"temperatures: expected positive values, found {float(temperatures.min())}")


def _check_float_matrix(name: str, value: object) -> Tensor:
    return check_tensor(name, value, dtype=FLOAT_DTYPES, ndim=2)


# --------------------------------------------------------------------------------------------------
# D1 fast_topk


@define_op(
    "fast_topk", mutates=("out_values", "out_indices"), op_class="bandwidth", bytes_moved="numel(values)*elem"
)
def _fast_topk_portable(values: Tensor, k: int, dim: int, out_values: Tensor, out_indices: Tensor) -> None:
    if k == 1:  # max is one pass; topk sorts
        torch.max(values, dim, keepdim=True, out=(out_values, out_indices))
    else:
        torch.topk(values, k, dim, largest=True, sorted=True, out=(out_values, out_indices))


def fast_topk(
    values: Tensor, k: int, dim: int = -1, out: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """The ``k`` largest entries of ``values`` along ``dim``, in descending order.

    Used on draft logits/probabilities to pick each expanded node's children. ``k == 1`` runs a
    single max; otherwise ``torch.topk`` (sorted). Ties are unspecified.

    Args:
        values: ``[..., n]`` floating tensor.
        k: number of entries to keep, ``1 <= k <= n``.
        dim: the dimension to reduce (default last).
        out: optional ``(values[..., k] same dtype, indices[..., k] int64)``.

    Returns:
        ``(top_values, top_indices)`` with ``top_indices`` int64.
    """
    check_tensor("values", values, dtype=FLOAT_DTYPES)
    if values.dim() == 0:
        raise ValueError("values: expected at least a 1-D tensor, got a scalar")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim: expected an int, got {type(dim).__name__}")
    if not -values.dim() <= dim < values.dim():
        raise ValueError(f"dim: expected a dimension in [{-values.dim()}, {values.dim()}), got {dim}")
    dim %= values.dim()
    check_positive_int("k", k)
    if k > values.shape[dim]:
        raise ValueError(f"k: expected k <= values.shape[{dim}] = {values.shape[dim]}, got {k}")
    shape = list(values.shape)
    shape[dim] = k
    if out is None:
        out_values = new_output(shape, values.dtype, values.device)
        out_indices = new_output(shape, torch.int64, values.device)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ValueError("out: expected a tuple (values, indices)")
        out_values = check_output("out[0]", out[0], dtype=values.dtype, device=values.device, shape=shape)
        out_indices = check_output("out[1]", out[1], dtype=torch.int64, device=values.device, shape=shape)
    _fast_topk_portable.dispatch(values.device, values, k, dim, out_values, out_indices)
    return out_values, out_indices


# --------------------------------------------------------------------------------------------------
# D2 fast_sample


@define_op("fast_sample", mutates=("out_probs", "out_indices"), op_class="bandwidth", bytes_moved="B*V*elem")
def _fast_sample_portable(
    probs: Tensor, exp_noise: Tensor, num_samples: int, out_probs: Tensor, out_indices: Tensor
) -> None:
    indices = _exponential_race(probs, exp_noise, num_samples)
    out_indices.copy_(indices)
    torch.gather(probs, 1, indices, out=out_probs)


def fast_sample(
    probs: Tensor,
    num_samples: int = 1,
    generator: torch.Generator | None = None,
    out: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Sample token ids from each row of ``probs`` by the exponential race (no device sync).

    Used wherever the draft samples instead of taking a top-k (``sample_draft_proposal`` calls the
    same race). Draws ``num_samples`` distinct ids per row, in race order:
    ``topk(probs.float() / max(E, tiny), n)`` with ``E ~ Exp(1)`` fp32 noise drawn from ``generator``
    (torch's default generator of ``probs``' device when None). Rows need not sum to 1; an all-zero
    row gives id 0 (``num_samples == 1``).

    Args:
        probs: ``[B, V]`` floating, non-negative.
        num_samples: ``1 <= n <= V``.
        generator: a ``torch.Generator`` of ``probs``' device, or None.
        out: optional ``(p[B, n] probs' dtype, idx[B, n] int64)``.

    Returns:
        ``(p, idx)``: the sampled ids and their probabilities (``probs`` gathered at ``idx``).
    """
    _check_float_matrix("probs", probs)
    check_positive_int("num_samples", num_samples)
    batch, vocab = probs.shape
    if num_samples > vocab:
        raise ValueError(f"num_samples: expected at most probs.shape[1] = {vocab}, got {num_samples}")
    device = probs.device
    _check_generator(generator, device)
    shape = (batch, num_samples)
    out_probs, out_indices = _outputs(
        out, [("out[0]", shape, probs.dtype), ("out[1]", shape, torch.int64)], device
    )
    assert out_probs is not None and out_indices is not None
    if batch == 0:
        return out_probs, out_indices
    exp_noise = _exponential_noise(probs.shape, device, generator)
    _fast_sample_portable.dispatch(device, probs, exp_noise, num_samples, out_probs, out_indices)
    return out_probs, out_indices


# --------------------------------------------------------------------------------------------------
# D3 renorm_draft_probs


@define_op("renorm_draft_probs", mutates=("probs",), op_class="bandwidth", bytes_moved="B*V*(elem+4)")
def _renorm_draft_probs_portable(logits: Tensor, temperatures: Tensor | None, probs: Tensor) -> None:
    _tempered_softmax(logits, temperatures, probs)


def renorm_draft_probs(
    logits: Tensor,
    temperatures: Tensor | None,
    use_rejection_sampling: bool,
    probs: Tensor | None = None,
) -> Tensor:
    """The draft distribution ``q`` the verifier is given: ``softmax(logits)`` in fp32.

    With rejection sampling the target verifies against the draft's *tempered* distribution, so the
    logits are divided by each request's temperature first: ``softmax(logits / temperatures)``.

    Args:
        logits: ``[B, V]`` floating.
        temperatures: ``[B, 1]`` float32, positive; only read with rejection sampling (None allowed
            without it).
        use_rejection_sampling: whether to apply the temperatures.
        probs: optional output ``[B, V]`` float32.

    Returns:
        ``probs``.
    """
    _check_float_matrix("logits", logits)
    if not isinstance(use_rejection_sampling, bool):
        raise TypeError(
            f"use_rejection_sampling: expected a bool, got {type(use_rejection_sampling).__name__}"
        )
    batch, vocab = logits.shape
    if temperatures is not None:
        _check_temperatures(temperatures, batch)
    elif use_rejection_sampling:
        raise ValueError("temperatures: required with use_rejection_sampling=True, got None")
    device = common_device(logits=logits, temperatures=temperatures)
    if temperatures is not None:
        _check_positive_temperatures(temperatures, device)
    if probs is None:
        probs = new_output((batch, vocab), torch.float32, device)
    else:
        check_output("probs", probs, dtype=torch.float32, device=device, shape=(batch, vocab))
    if batch == 0:
        return probs
    applied = temperatures if use_rejection_sampling else None
    _renorm_draft_probs_portable.dispatch(device, logits, applied, probs)
    return probs


# --------------------------------------------------------------------------------------------------
# D4 sample_draft_proposal


@define_op(
    "sample_draft_proposal",
    mutates=("out_q", "out_q_x", "out_x"),
    op_class="bandwidth",
    bytes_moved="B*V*(elem+4)",
    variant=_index_dtypes(2),
)
def _sample_draft_proposal_portable(
    logits: Tensor,
    temperatures: Tensor,
    top_ks: Tensor | None,
    exp_noise: Tensor,
    out_q: Tensor,
    out_q_x: Tensor,
    out_x: Tensor,
) -> None:
    _tempered_softmax(logits, temperatures, out_q)
    tokens = _exponential_race(out_q, exp_noise, 1)
    if top_ks is not None:  # greedy requests take the mode of q
        greedy = (top_ks <= 1).unsqueeze(1)
        tokens = torch.where(greedy, out_q.argmax(dim=-1, keepdim=True), tokens)
    out_x.copy_(tokens)
    torch.gather(out_q, 1, tokens, out=out_q_x)


def sample_draft_proposal(
    logits: Tensor,
    temperatures: Tensor,
    top_ks: Tensor | None = None,
    generator: torch.Generator | None = None,
    out: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Sample one draft token per row from ``q = softmax(logits / temperatures)`` (fp32).

    Used by drafts verified with rejection sampling: the verifier needs the exact ``q`` the token was
    drawn from. ``x`` is drawn by ``fast_sample``'s exponential race (noise from ``generator``);
    rows with ``top_ks <= 1`` (greedy requests) take ``argmax(q)`` instead (ties: lowest id).

    Args:
        logits: ``[B, V]`` floating.
        temperatures: ``[B, 1]`` float32, positive.
        top_ks: optional ``[B]`` int32/int64 per-request top-k (only ``<= 1`` matters here).
        generator: a ``torch.Generator`` of the logits' device, or None (torch's default).
        out: optional ``(q[B, V] f32, q_x[B, 1] f32, x[B, 1] i64)``.

    Returns:
        ``(q, q_x, x)`` with ``q_x = q[x]``.
    """
    _check_float_matrix("logits", logits)
    batch, vocab = logits.shape
    _check_temperatures(temperatures, batch)
    if top_ks is not None:
        check_index("top_ks", top_ks, shape=(batch,))
    device = common_device(logits=logits, temperatures=temperatures, top_ks=top_ks)
    _check_positive_temperatures(temperatures, device)
    if vocab == 0:
        raise ValueError("logits: expected a non-empty vocabulary (V >= 1)")
    _check_generator(generator, device)
    specs: list[OutputSpec | None] = [
        ("out[0]", (batch, vocab), torch.float32),
        ("out[1]", (batch, 1), torch.float32),
        ("out[2]", (batch, 1), torch.int64),
    ]
    out_q, out_q_x, out_x = _outputs(out, specs, device)
    assert out_q is not None and out_q_x is not None and out_x is not None
    if batch == 0:
        return out_q, out_q_x, out_x
    exp_noise = _exponential_noise(logits.shape, device, generator)
    _sample_draft_proposal_portable.dispatch(
        device, logits, temperatures, top_ks, exp_noise, out_q, out_q_x, out_x
    )
    return out_q, out_q_x, out_x


# --------------------------------------------------------------------------------------------------
# D5 select_top_k_tokens


@define_op(
    "select_top_k_tokens",
    mutates=(
        "out_input_ids",
        "out_hidden",
        "out_scores",
        "out_tree_scores",
        "out_tree_tokens",
        "out_tree_parents",
    ),
    op_class="bandwidth",
    bytes_moved="2*b*K*H*elem(hidden)",
    variant=_index_dtypes(2),
)
def _select_top_k_tokens_portable(
    i: int,
    topk_p: Tensor,
    topk_index: Tensor,
    hidden_states: Tensor | None,
    scores: Tensor | None,
    topk: int,
    out_input_ids: Tensor,
    out_hidden: Tensor | None,
    out_scores: Tensor,
    out_tree_scores: Tensor,
    out_tree_tokens: Tensor,
    out_tree_parents: Tensor,
) -> None:
    batch = out_scores.shape[0]
    device = topk_p.device
    if i == 0:  # the root's K children: every request keeps all of them
        out_input_ids.copy_(topk_index.flatten())
        out_scores.copy_(topk_p)
        out_tree_scores.copy_(topk_p.unsqueeze(1))
        out_tree_tokens.copy_(topk_index)
        out_tree_parents.copy_(torch.arange(-1, topk, device=device))
        source_rows = torch.arange(batch * topk, device=device) // topk
    else:  # K*K candidates (K children of each of the K frontier nodes): keep the K best path scores
        assert scores is not None  # the contract requires scores for i > 0
        path_scores = scores.unsqueeze(2) * topk_p.reshape(batch, topk, topk)
        out_tree_scores.copy_(path_scores)
        best_scores, chosen = torch.topk(path_scores.reshape(batch, topk * topk), topk, dim=-1)
        out_scores.copy_(best_scores)
        candidate_tokens = topk_index.reshape(batch, topk * topk)
        out_tree_tokens.copy_(candidate_tokens)
        out_input_ids.copy_(candidate_tokens.gather(1, chosen).flatten())
        # Parent ids count tree nodes: the root's K children, then K*K candidates per earlier step.
        out_tree_parents.copy_(chosen + (topk * topk * (i - 1) + topk))
        frontier_base = torch.arange(batch, device=device).unsqueeze(1) * topk
        source_rows = (frontier_base + chosen // topk).flatten()
    if hidden_states is not None:
        assert out_hidden is not None
        torch.index_select(hidden_states, 0, source_rows, out=out_hidden)


def select_top_k_tokens(
    i: int,
    topk_p: Tensor,
    topk_index: Tensor,
    hidden_states: Tensor | None,
    scores: Tensor | None,
    topk: int,
    out: tuple | None = None,
) -> tuple[Tensor, Tensor | None, Tensor, tuple[Tensor, Tensor, Tensor]]:
    """Expand the draft tree by one step: choose the next ``topk`` frontier nodes of each request.

    Called after each draft forward ``i`` of an EAGLE tree draft; its ``tree_info`` triples are
    collected for ``organize_draft_results``. Step ``i == 0`` keeps the root's ``topk`` children;
    step ``i > 0`` scores the ``topk * topk`` children of the frontier by path probability
    (``scores[:, :, None] * topk_p``) and keeps the ``topk`` best (descending; ties unspecified).

    Args:
        i: the draft step, ``>= 0``.
        topk_p: float32 ``[b, K]`` if ``i == 0`` else ``[b*K, K]``: child probabilities.
        topk_index: int32/int64, same shape: child token ids.
        hidden_states: ``[b, H]`` if ``i == 0`` else ``[b*K, H]`` (any dtype), or None.
        scores: float32 ``[b, K]`` path scores of the frontier; None when ``i == 0``.
        topk: K, ``>= 1``.
        out: optional tuple shaped like the returns (``hidden`` entry None without hidden states).

    Returns:
        ``(input_ids[b*K] i64, hidden[b*K, H] or None, scores[b, K] f32,
        (tree_scores f32, tree_tokens i64, tree_parents i64))``; the tree triple is
        ``([b, 1, K], [b, K], [b, K+1])`` at ``i == 0`` and ``([b, K, K], [b, K*K], [b, K])`` after.
        Every output is a new tensor (``scores`` at ``i == 0`` is a copy of ``topk_p``).
    """
    check_positive_int("i", i, minimum=0)
    check_positive_int("topk", topk)
    check_tensor("topk_p", topk_p, dtype=torch.float32, ndim=2)
    check_index("topk_index", topk_index, ndim=2)
    rows = topk_p.shape[0]
    if i == 0:
        batch = rows
        if scores is not None:
            raise ValueError("scores: expected None at step i == 0 (the root has no path score)")
    else:
        if rows % topk:
            raise ValueError(
                f"topk_p: expected [b*K, K] rows with K = {topk} at step i > 0, got {tuple(topk_p.shape)}"
            )
        batch = rows // topk
        if scores is None:
            raise ValueError("scores: required at step i > 0")
        check_tensor("scores", scores, dtype=torch.float32, shape=(batch, topk))
    check_tensor("topk_p", topk_p, shape=(rows, topk))
    check_tensor("topk_index", topk_index, shape=(rows, topk))
    if hidden_states is not None:
        check_tensor("hidden_states", hidden_states, shape=(rows, None))
    device = common_device(topk_p=topk_p, topk_index=topk_index, hidden_states=hidden_states, scores=scores)
    hidden_spec: OutputSpec | None = None
    if hidden_states is not None:
        hidden_spec = ("out[1]", (batch * topk, hidden_states.shape[1]), hidden_states.dtype)
    if i == 0:
        tree_shapes = ((batch, 1, topk), (batch, topk), (batch, topk + 1))
    else:
        tree_shapes = ((batch, topk, topk), (batch, topk * topk), (batch, topk))
    flat_out = None
    if out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 4 or not isinstance(out[3], (tuple, list)):
            raise ValueError(
                "out: expected (input_ids, hidden or None, scores, (tree_scores, tree_tokens, tree_parents))"
            )
        flat_out = (*out[:3], *out[3])
    specs: list[OutputSpec | None] = [
        ("out[0]", (batch * topk,), torch.int64),
        hidden_spec,
        ("out[2]", (batch, topk), torch.float32),
        ("out[3][0]", tree_shapes[0], torch.float32),
        ("out[3][1]", tree_shapes[1], torch.int64),
        ("out[3][2]", tree_shapes[2], torch.int64),
    ]
    input_ids, hidden, new_scores, tree_scores, tree_tokens, tree_parents = _outputs(flat_out, specs, device)
    assert input_ids is not None and new_scores is not None
    assert tree_scores is not None and tree_tokens is not None and tree_parents is not None
    if batch > 0:
        _select_top_k_tokens_portable.dispatch(
            device, i, topk_p, topk_index, hidden_states, scores, topk,
            input_ids, hidden, new_scores, tree_scores, tree_tokens, tree_parents,
        )  # fmt: skip
    return input_ids, hidden, new_scores, (tree_scores, tree_tokens, tree_parents)


# --------------------------------------------------------------------------------------------------
# D6 topk = 1 postprocessing (the three share _argmax_nan_low)


@define_op(
    "draft_topk1_postprocess",
    mutates=("positions", "draft_tokens", "out_topk_p", "out_topk_index"),
    op_class="bandwidth",
    bytes_moved="B*V*elem",
    variant=_index_dtypes(1),
)
def _draft_topk1_postprocess_portable(
    logits: Tensor,
    positions: Tensor,
    draft_tokens: Tensor | None,
    draft_token_column: int,
    out_topk_p: Tensor,
    out_topk_index: Tensor,
) -> None:
    tokens = _argmax_nan_low(logits)
    out_topk_index.copy_(tokens)
    out_topk_p.fill_(1.0)
    positions.add_(1)
    if draft_tokens is not None:
        draft_tokens[:, draft_token_column].copy_(tokens.squeeze(1))


def draft_topk1_postprocess(
    logits: Tensor,
    positions: Tensor,
    draft_tokens: Tensor | None = None,
    draft_token_column: int = 0,
    out: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """One chain (topk = 1) draft step: greedy token, advance positions, record the token.

    Used after each draft forward of MTP/NextN (topk = 1): ``topk_index = argmax(logits)`` (NaN
    ranks as -1e30, ties lowest id), ``topk_p = 1``; ``positions += 1``; and when ``draft_tokens`` is
    given, ``draft_tokens[:, draft_token_column] = topk_index`` (other columns untouched).

    Args:
        logits: ``[B, V]`` floating, unit stride along V.
        positions: ``[B]`` int32/int64, incremented in place.
        draft_tokens: optional ``[B, C]`` int64, column ``draft_token_column`` written.
        draft_token_column: ``0 <= column < C``.
        out: optional ``(topk_p[B, 1] f32, topk_index[B, 1] i64)``.

    Returns:
        ``(topk_p, topk_index)``.
    """
    _check_float_matrix("logits", logits)
    batch, vocab = logits.shape
    if vocab == 0:
        raise ValueError("logits: expected a non-empty vocabulary (V >= 1)")
    if vocab > 1 and logits.stride(1) != 1:
        raise ValueError(f"logits: expected unit stride along V, got strides {logits.stride()}")
    check_index("positions", positions, shape=(batch,))
    check_positive_int("draft_token_column", draft_token_column, minimum=0)
    if draft_tokens is not None:
        check_tensor("draft_tokens", draft_tokens, dtype=torch.int64, shape=(batch, None))
        if draft_token_column >= draft_tokens.shape[1]:
            raise ValueError(
                f"draft_token_column: expected < draft_tokens.shape[1] = {draft_tokens.shape[1]}, "
                f"got {draft_token_column}"
            )
    device = common_device(logits=logits, positions=positions, draft_tokens=draft_tokens)
    specs: list[OutputSpec | None] = [
        ("out[0]", (batch, 1), torch.float32),
        ("out[1]", (batch, 1), torch.int64),
    ]
    topk_p, topk_index = _outputs(out, specs, device)
    assert topk_p is not None and topk_index is not None
    if batch > 0:
        _draft_topk1_postprocess_portable.dispatch(
            device, logits, positions, draft_tokens, draft_token_column, topk_p, topk_index
        )
    return topk_p, topk_index


class TargetVerifyTopk1Output(NamedTuple):
    """The results of ``target_verify_topk1_postprocess`` (§P order)."""

    predicts: Tensor  # [bs*D] int32
    num_correct_drafts: Tensor  # [bs] int32
    accept_lens: Tensor  # [bs] int32
    accept_index: Tensor  # [bs, D] int32
    bonus_tokens: Tensor  # [bs] int32
    new_seq_lens: Tensor  # [bs] int64
    select_index: Tensor  # [bs] int64
    draft_tokens: Tensor  # [bs*D] int64


def _greedy_chain_walk(
    target_tokens: Tensor, candidates: Tensor, retrieve_index: Tensor, retrieve_next_token: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """C3's walk without siblings: accept while the child's draft token is the target's token.

    Returns ``(predicts[bs*D] i32, num_correct_drafts[bs] i64, accept_index[bs, D] i64,
    bonus[bs] i64)``. Out-of-range ids stop the walk and are never used as write positions.
    """
    batch, draft_token_num = candidates.shape
    num_nodes = batch * draft_token_num
    device = candidates.device
    # One scratch entry past the nodes takes the writes of lanes that must not write.
    predicts = torch.zeros(num_nodes + 1, dtype=torch.int32, device=device)
    accept_index = torch.full((batch, draft_token_num), -1, dtype=torch.int64, device=device)
    last = retrieve_index[:, 0].long()
    accept_index[:, 0] = last
    current = torch.zeros(batch, 1, dtype=torch.int64, device=device)
    num_correct = torch.zeros(batch, dtype=torch.int64, device=device)
    walking = torch.ones(batch, dtype=torch.bool, device=device)
    for step in range(1, draft_token_num):
        child = retrieve_next_token.gather(1, current).long()
        child_ok = (child >= 0) & (child < draft_token_num)
        child = torch.where(child_ok, child, 0)
        last_ok = (last >= 0) & (last < num_nodes)
        target_at_last = target_tokens[torch.where(last_ok, last, 0)]
        accepted = walking & child_ok.squeeze(1) & last_ok
        accepted &= candidates.gather(1, child).squeeze(1).long() == target_at_last
        predicts.scatter_(0, torch.where(accepted, last, num_nodes), target_at_last.int())
        child_node = retrieve_index.gather(1, child).squeeze(1).long()
        accept_index[:, step] = torch.where(accepted, child_node, -1)
        last = torch.where(accepted, child_node, last)
        current = torch.where(accepted.unsqueeze(1), child, current)
        num_correct += accepted.long()
        walking = accepted
    last_ok = (last >= 0) & (last < num_nodes)
    bonus = torch.where(last_ok, target_tokens[torch.where(last_ok, last, 0)], 0)
    predicts.scatter_(0, torch.where(last_ok, last, num_nodes), bonus.int())
    return predicts[:num_nodes], num_correct, accept_index, bonus


def _simulated_chain(
    logits: Tensor, candidates: Tensor, num_accept: int, use_real_draft_tokens: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The simulated-acceptance override (like E2): every row accepts ``num_accept - 1`` drafts."""
    batch, draft_token_num = candidates.shape
    device = candidates.device
    node = torch.arange(draft_token_num, device=device)
    row_base = torch.arange(batch, device=device).unsqueeze(1) * draft_token_num
    accept_index = torch.where(node < num_accept, row_base + node, -1)
    num_correct = torch.full((batch,), num_accept - 1, dtype=torch.int64, device=device)
    if use_real_draft_tokens:
        # Only row b*D + num_accept - 1 feeds the bonus: argmax just those rows.
        bonus = _argmax_nan_low(logits[num_accept - 1 :: draft_token_num]).squeeze(1)
        predicts = torch.zeros(batch, draft_token_num, dtype=torch.int32, device=device)
        predicts[:, : num_accept - 1] = candidates[:, 1:num_accept]
        predicts[:, num_accept - 1] = bonus
        predicts = predicts.flatten()
    else:
        bonus = torch.full((batch,), SIMULATED_TOKEN, dtype=torch.int64, device=device)
        predicts = torch.full((batch * draft_token_num,), SIMULATED_TOKEN, dtype=torch.int32, device=device)
    return predicts, num_correct, accept_index, bonus


@define_op(
    "target_verify_topk1_postprocess",
    mutates=(
        "out_predicts", "out_num_correct_drafts", "out_accept_lens", "out_accept_index",
        "out_bonus_tokens", "out_new_seq_lens", "out_select_index", "out_draft_tokens",
    ),
    op_class="bandwidth",
    bytes_moved="bs*D*V*elem",
    variant=_index_dtypes(1, 2, 3, 4),
)  # fmt: skip
def _target_verify_topk1_postprocess_portable(
    logits: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    seq_lens: Tensor,
    num_simulated_accept_tokens: int,
    use_real_draft_tokens: bool,
    out_predicts: Tensor,
    out_num_correct_drafts: Tensor,
    out_accept_lens: Tensor,
    out_accept_index: Tensor,
    out_bonus_tokens: Tensor,
    out_new_seq_lens: Tensor,
    out_select_index: Tensor,
    out_draft_tokens: Tensor,
) -> None:
    batch, draft_token_num = candidates.shape
    if num_simulated_accept_tokens > 0:
        chain = _simulated_chain(logits, candidates, num_simulated_accept_tokens, use_real_draft_tokens)
    else:
        target_tokens = _argmax_nan_low(logits).flatten()
        chain = _greedy_chain_walk(target_tokens, candidates, retrieve_index, retrieve_next_token)
    predicts, num_correct, accept_index, bonus = chain
    accept_lens = num_correct + 1
    out_predicts.copy_(predicts)
    out_draft_tokens.copy_(predicts)
    out_num_correct_drafts.copy_(num_correct)
    out_accept_lens.copy_(accept_lens)
    out_accept_index.copy_(accept_index)
    out_bonus_tokens.copy_(bonus)
    out_new_seq_lens.copy_(seq_lens.long() + accept_lens)
    out_select_index.copy_(torch.arange(batch, device=candidates.device) * draft_token_num + num_correct)


def target_verify_topk1_postprocess(
    logits: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    seq_lens: Tensor,
    num_simulated_accept_tokens: int = 0,
    use_real_draft_tokens: bool = False,
    out: TargetVerifyTopk1Output | tuple | None = None,
) -> TargetVerifyTopk1Output:
    """Greedy verify of chain drafts (topk = 1) straight from the target's logits, in one op.

    Used after TARGET_VERIFY for MTP/NextN chains: the target's token at each node is the D6 argmax
    of its logits row (NaN as -1e30, ties lowest id); then ``verify_tree_greedy``'s walk without
    siblings. ``predicts`` holds the target token at each accepted node and the bonus at the last
    one (0 elsewhere); ``accept_index`` the accepted flat ids, -1 padded; ``accept_lens =
    num_correct_drafts + 1``; ``new_seq_lens = seq_lens + accept_lens``; ``select_index = b*D +
    num_correct_drafts``; ``draft_tokens`` is ``predicts`` as int64.

    Simulated acceptance (benchmarking): ``n = num_simulated_accept_tokens > 0`` accepts ``n - 1``
    drafts in every row (``accept_index`` row ``b*D + [0, n)``); with ``use_real_draft_tokens``
    ``predicts[b*D + k] = candidates[b, k+1]`` for ``k < n-1`` and the bonus is the argmax of row
    ``b*D + n-1``, else every ``predicts`` entry and the bonus are 100.

    Args:
        logits: ``[bs*D, V]`` floating, one row per draft node (after penalties/grammar masks).
        candidates, retrieve_index, retrieve_next_token: ``[bs, D]`` int32/int64.
        seq_lens: ``[bs]`` int32/int64, committed lengths before this step.
        num_simulated_accept_tokens: ``0 <= n <= D``; 0 verifies for real.
        use_real_draft_tokens: needs ``n > 0``.
        out: optional ``TargetVerifyTopk1Output`` (or 8-tuple) of outputs.

    Returns:
        ``TargetVerifyTopk1Output``.
    """
    check_index("candidates", candidates, ndim=2)
    batch, draft_token_num = candidates.shape
    if draft_token_num == 0:
        raise ValueError("candidates: expected D >= 1 columns (node 0 is the root)")
    _check_float_matrix("logits", logits)
    check_tensor("logits", logits, shape=(batch * draft_token_num, None))
    check_index("retrieve_index", retrieve_index, shape=(batch, draft_token_num))
    check_index("retrieve_next_token", retrieve_next_token, shape=(batch, draft_token_num))
    check_index("seq_lens", seq_lens, shape=(batch,))
    device = common_device(
        logits=logits,
        candidates=candidates,
        retrieve_index=retrieve_index,
        retrieve_next_token=retrieve_next_token,
        seq_lens=seq_lens,
    )
    check_positive_int("num_simulated_accept_tokens", num_simulated_accept_tokens, minimum=0)
    if num_simulated_accept_tokens > draft_token_num:
        raise ValueError(
            f"num_simulated_accept_tokens: expected at most D = {draft_token_num}, got {num_simulated_accept_tokens}"
        )
    if not isinstance(use_real_draft_tokens, bool):
        raise TypeError(f"use_real_draft_tokens: expected a bool, got {type(use_real_draft_tokens).__name__}")
    if use_real_draft_tokens and num_simulated_accept_tokens == 0:
        raise ValueError("use_real_draft_tokens: needs num_simulated_accept_tokens > 0")
    if logits.shape[1] == 0 and (num_simulated_accept_tokens == 0 or use_real_draft_tokens):
        raise ValueError("logits: expected a non-empty vocabulary (V >= 1)")
    if value_checks_enabled(device):
        check_range("retrieve_index", retrieve_index, 0, batch * draft_token_num)
        check_range("retrieve_next_token", retrieve_next_token, 0, draft_token_num, allow=-1)
        check_non_negative("seq_lens", seq_lens)
        if use_real_draft_tokens:
            check_fits_int32("candidates", candidates[:, 1:num_simulated_accept_tokens])
    specs: list[OutputSpec | None] = [
        (f"out.{name}", shape, dtype)
        for name, shape, dtype in (
            ("predicts", (batch * draft_token_num,), torch.int32),
            ("num_correct_drafts", (batch,), torch.int32),
            ("accept_lens", (batch,), torch.int32),
            ("accept_index", (batch, draft_token_num), torch.int32),
            ("bonus_tokens", (batch,), torch.int32),
            ("new_seq_lens", (batch,), torch.int64),
            ("select_index", (batch,), torch.int64),
            ("draft_tokens", (batch * draft_token_num,), torch.int64),
        )
    ]
    result = TargetVerifyTopk1Output(*_outputs(out, specs, device))  # type: ignore[arg-type]
    if batch > 0:
        _target_verify_topk1_postprocess_portable.dispatch(
            device, logits, candidates, retrieve_index, retrieve_next_token, seq_lens,
            num_simulated_accept_tokens, use_real_draft_tokens, *result,
        )  # fmt: skip
    return result


@define_op(
    "draft_extend_topk1_postprocess",
    mutates=("out_topk_p", "out_topk_index", "out_hidden", "out_dsa_topk_indices"),
    op_class="bandwidth",
    bytes_moved="bs*V*elem + 2*bs*(H*elem_h + T*elem_t)",
    variant=_index_dtypes(1, 3),
)
def _draft_extend_topk1_postprocess_portable(
    logits: Tensor,
    row_indices: Tensor,
    hidden_states: Tensor | None,
    dsa_topk_indices: Tensor | None,
    out_topk_p: Tensor,
    out_topk_index: Tensor,
    out_hidden: Tensor | None,
    out_dsa_topk_indices: Tensor | None,
) -> None:
    num_rows = logits.shape[0]
    if num_rows == 0:  # every row index is out of range: nothing to write
        return
    rows = row_indices.long()
    row_ok = ((rows >= 0) & (rows < num_rows)).unsqueeze(1)
    safe_rows = torch.where(row_ok.squeeze(1), rows, 0)

    def write_valid_rows(out: Tensor, values: Tensor | float) -> None:
        # Out-of-range row indices are masked lanes: their output rows keep what they held.
        out.copy_(torch.where(row_ok, values, out))

    write_valid_rows(out_topk_index, _argmax_nan_low(logits.index_select(0, safe_rows)))
    write_valid_rows(out_topk_p, 1.0)
    if hidden_states is not None and out_hidden is not None:
        write_valid_rows(out_hidden, hidden_states.index_select(0, safe_rows))
    if dsa_topk_indices is not None and out_dsa_topk_indices is not None:
        write_valid_rows(out_dsa_topk_indices, dsa_topk_indices.index_select(0, safe_rows))


def draft_extend_topk1_postprocess(
    logits: Tensor,
    row_indices: Tensor,
    hidden_states: Tensor | None = None,
    dsa_topk_indices: Tensor | None = None,
    out: tuple | None = None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """After the draft-extend forward (topk = 1): greedy token and state of each request's last row.

    Used at the end of an iteration to seed the next draft: for each request, row ``row_indices[b]``
    of the extend batch gives ``topk_index = argmax(logits[row])`` (NaN as -1e30, ties lowest id),
    ``topk_p = 1``, and the same row of ``hidden_states`` and of the DSA top-k index buffer.

    Args:
        logits: ``[N, V]`` floating.
        row_indices: ``[bs]`` int32/int64 in ``[0, N)``.
        hidden_states: optional ``[N, H]`` (any dtype).
        dsa_topk_indices: optional ``[N, T]`` int32/int64.
        out: optional ``(topk_p[bs, 1] f32, topk_index[bs, 1] i64, hidden[bs, H] or None,
            dsa[bs, T] or None)`` (None where the input is None).

    Returns:
        ``(topk_p, topk_index, hidden or None, dsa or None)``; gathered rows keep their dtype.
    """
    _check_float_matrix("logits", logits)
    num_rows, vocab = logits.shape
    if vocab == 0:
        raise ValueError("logits: expected a non-empty vocabulary (V >= 1)")
    check_index("row_indices", row_indices)
    batch = row_indices.shape[0]
    hidden_spec: OutputSpec | None = None
    if hidden_states is not None:
        check_tensor("hidden_states", hidden_states, shape=(num_rows, None))
        hidden_spec = ("out[2]", (batch, hidden_states.shape[1]), hidden_states.dtype)
    dsa_spec: OutputSpec | None = None
    if dsa_topk_indices is not None:
        check_index("dsa_topk_indices", dsa_topk_indices, shape=(num_rows, None))
        dsa_spec = ("out[3]", (batch, dsa_topk_indices.shape[1]), dsa_topk_indices.dtype)
    device = common_device(
        logits=logits, row_indices=row_indices, hidden_states=hidden_states, dsa_topk_indices=dsa_topk_indices
    )
    if value_checks_enabled(device):
        check_range("row_indices", row_indices, 0, num_rows)
    specs = [
        ("out[0]", (batch, 1), torch.float32),
        ("out[1]", (batch, 1), torch.int64),
        hidden_spec,
        dsa_spec,
    ]
    topk_p, topk_index, hidden, dsa = _outputs(out, specs, device)
    assert topk_p is not None and topk_index is not None
    if batch > 0:
        _draft_extend_topk1_postprocess_portable.dispatch(
            device, logits, row_indices, hidden_states, dsa_topk_indices, topk_p, topk_index, hidden, dsa
        )
    return topk_p, topk_index, hidden, dsa
