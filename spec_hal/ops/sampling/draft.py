"""Family D, draft sampling and tree expansion: top-k, sampling, probability renormalisation, draft
proposals, and the top-k selection of a draft step."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    ANY_SIZE,
    FLOAT_DTYPES,
    OutputSpec,
    check_float_matrix,
    check_index,
    check_keys,
    check_logits,
    check_output,
    check_positions,
    check_positive_int,
    check_step,
    check_tensor,
    checked_outputs,
    common_device,
    device_kind,
    empty,
    new_output,
    new_outputs,
    value_checks_enabled,
)
from ._common import exponential_race, race_noise, tempered_softmax

# --------------------------------------------------------------------------------------------------
# D1 fast_topk


def _fast_topk_reference(values: Tensor, k: int, dim: int, out_values: Tensor, out_indices: Tensor) -> None:
    if k == 1:  # max is one pass; topk sorts
        torch.max(values, dim, keepdim=True, out=(out_values, out_indices))
    else:
        torch.topk(values, k, dim, largest=True, sorted=True, out=(out_values, out_indices))


@define_op(
    _fast_topk_reference,
    mutates=("out_values", "out_indices"),
    op_class="bandwidth",
    variant=("k",),
)
def fast_topk(
    op: OpDef, values: Tensor, k: int, dim: int = -1, out: tuple[Tensor, Tensor] | None = None
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
    sizes = values.shape
    shape = (*sizes[:dim], k, *sizes[dim + 1 :])
    device = values.device
    if out is None:
        out_values, out_indices = new_outputs([(shape, values.dtype), (shape, torch.int64)], device)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ValueError("out: expected a tuple (values, indices)")
        out_values = check_output("out[0]", out[0], dtype=values.dtype, device=device, shape=shape)
        out_indices = check_output("out[1]", out[1], dtype=torch.int64, device=device, shape=shape)
    op.dispatch(device, values, k, dim, out_values, out_indices)
    return out_values, out_indices


# --------------------------------------------------------------------------------------------------
# D2 fast_sample


def _fast_sample_reference(
    probs: Tensor,
    exp_noise: Tensor | None,
    seeds: Tensor | None,
    positions: Tensor | None,
    step: int,
    num_samples: int,
    out_probs: Tensor,
    out_indices: Tensor,
) -> None:
    indices = exponential_race(probs, race_noise(probs, exp_noise, seeds, positions, step), num_samples)
    out_indices.copy_(indices)
    torch.gather(probs, 1, indices, out=out_probs)


@define_op(
    _fast_sample_reference,
    mutates=("out_probs", "out_indices"),
    op_class="bandwidth",
    variant=("num_samples",),
)
def fast_sample(
    op: OpDef,
    probs: Tensor,
    num_samples: int = 1,
    generator: torch.Generator | None = None,
    out: tuple[Tensor, Tensor] | None = None,
    *,
    seeds: Tensor | None = None,
    positions: Tensor | None = None,
    step: int = 0,
) -> tuple[Tensor, Tensor]:
    """Sample token ids from each row of ``probs`` by the exponential race (no device sync).

    Used wherever the draft samples instead of taking a top-k (``sample_draft_proposal`` calls the
    same race). Draws ``num_samples`` distinct ids per row, in race order:
    ``topk(probs.float() / max(E, tiny), n)`` (equal scores: the lower id first) with ``E ~ Exp(1)``
    fp32 noise. Rows need not sum to 1; an all-zero row gives ids 0, 1, ...

    The noise comes from one of two places:

    * ``generator`` (torch's default generator of ``probs``' device when None): drawn by this call
      as a ``[B, V]`` tensor before the provider runs, so a row's sample depends on the batch
      around it and on whatever else drew from the generator;
    * keyed (``seeds`` and ``positions`` given, ``generator`` None): ``E = -log(u)`` with ``u`` the
      uniform of ``keyed_uniform(seeds, positions, step, DRAFT_PROPOSAL, V)`` at lane = token id,
      computed inside the provider. No generator is touched; a row's ids are bitwise the same alone
      or in any batch, in a graph replay, and on every provider of a device. Across vendors they are
      equal except where a row's two best scores lie within 4 float32 ulp (``log`` differs in its
      last bits between libraries).

    Args:
        probs: ``[B, V]`` floating, non-negative.
        num_samples: ``1 <= n <= V``.
        generator: a ``torch.Generator`` of ``probs``' device, or None.
        out: optional ``(p[B, n] probs' dtype, idx[B, n] int64)``.
        seeds: keyed draws: ``[B]`` int64, one seed per request (any value).
        positions: keyed draws: ``[B]`` int64 in ``[0, 2**48)``, each request's absolute position.
        step: keyed draws: the draft step, in ``[0, 2**16)``.

    Returns:
        ``(p, idx)``: the sampled ids and their probabilities (``probs`` gathered at ``idx``).
    """
    check_float_matrix("probs", probs)
    check_positive_int("num_samples", num_samples)
    batch, vocab = probs.shape
    if num_samples > vocab:
        raise ValueError(f"num_samples: expected at most probs.shape[1] = {vocab}, got {num_samples}")
    keyed = check_sampling_keys(seeds, positions, step, generator, batch)
    device = common_device(probs=probs, seeds=seeds, positions=positions) if keyed else probs.device
    check_generator(generator, device)
    shape = (batch, num_samples)
    out_probs, out_indices = checked_outputs(
        out, [("out[0]", shape, probs.dtype), ("out[1]", shape, torch.int64)], device
    )
    assert out_probs is not None and out_indices is not None
    if batch == 0:
        return out_probs, out_indices
    if keyed:
        check_positions(positions, device)  # type: ignore[arg-type]
        op.dispatch(device, probs, None, seeds, positions, step, num_samples, out_probs, out_indices)
    else:
        exp_noise = exponential_noise(probs.shape, device, generator)
        op.dispatch(device, probs, exp_noise, None, None, 0, num_samples, out_probs, out_indices)
    return out_probs, out_indices


# --------------------------------------------------------------------------------------------------
# D3 renorm_draft_probs


def _renorm_draft_probs_reference(logits: Tensor, temperatures: Tensor | None, probs: Tensor) -> None:
    tempered_softmax(logits, temperatures, probs)


@define_op(
    _renorm_draft_probs_reference,
    mutates=("probs",),
    op_class="bandwidth",
)
def renorm_draft_probs(
    op: OpDef,
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
    check_logits(logits)
    if not isinstance(use_rejection_sampling, bool):
        raise TypeError(
            f"use_rejection_sampling: expected a bool, got {type(use_rejection_sampling).__name__}"
        )
    batch, vocab = logits.shape
    if temperatures is not None:
        check_temperatures(temperatures, batch)
    elif use_rejection_sampling:
        raise ValueError("temperatures: required with use_rejection_sampling=True, got None")
    device = common_device(logits=logits, temperatures=temperatures)
    if temperatures is not None:
        check_positive_temperatures(temperatures, device)
    if probs is None:
        probs = new_output((batch, vocab), torch.float32, device)
    else:
        check_output("probs", probs, dtype=torch.float32, device=device, shape=(batch, vocab))
    if batch == 0:
        return probs
    applied = temperatures if use_rejection_sampling else None
    op.dispatch(device, logits, applied, probs)
    return probs


# --------------------------------------------------------------------------------------------------
# D4 sample_draft_proposal


def _sample_draft_proposal_reference(
    logits: Tensor,
    temperatures: Tensor,
    top_ks: Tensor | None,
    exp_noise: Tensor | None,
    seeds: Tensor | None,
    positions: Tensor | None,
    step: int,
    out_q: Tensor,
    out_q_x: Tensor,
    out_x: Tensor,
) -> None:
    tempered_softmax(logits, temperatures, out_q)
    tokens = exponential_race(out_q, race_noise(out_q, exp_noise, seeds, positions, step), 1)
    if top_ks is not None:  # greedy requests take the mode of q
        greedy = (top_ks <= 1).unsqueeze(1)
        tokens = torch.where(greedy, out_q.argmax(dim=-1, keepdim=True), tokens)
    out_x.copy_(tokens)
    torch.gather(out_q, 1, tokens, out=out_q_x)


@define_op(
    _sample_draft_proposal_reference,
    mutates=("out_q", "out_q_x", "out_x"),
    op_class="bandwidth",
    variant=("top_ks", "seeds"),
)
def sample_draft_proposal(
    op: OpDef,
    logits: Tensor,
    temperatures: Tensor,
    top_ks: Tensor | None = None,
    generator: torch.Generator | None = None,
    out: tuple[Tensor, Tensor, Tensor] | None = None,
    *,
    seeds: Tensor | None = None,
    positions: Tensor | None = None,
    step: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Sample one draft token per row from ``q = softmax(logits / temperatures)`` (fp32).

    Used by drafts verified with rejection sampling: the verifier needs the exact ``q`` the token was
    drawn from. ``x`` is drawn by ``fast_sample``'s exponential race, with noise from ``generator``
    or, with ``seeds`` and ``positions``, keyed noise computed inside the provider (no generator
    touched; see ``fast_sample``); rows with ``top_ks <= 1`` (greedy requests) take ``argmax(q)``
    instead (ties: lowest id). A row's ``q`` is bitwise the same alone or in any batch.

    Args:
        logits: ``[B, V]`` floating.
        temperatures: ``[B, 1]`` float32, positive.
        top_ks: optional ``[B]`` int32/int64 per-request top-k (only ``<= 1`` matters here).
        generator: a ``torch.Generator`` of the logits' device, or None (torch's default).
        out: optional ``(q[B, V] f32, q_x[B, 1] f32, x[B, 1] i64)``.
        seeds: keyed draws: ``[B]`` int64, one seed per request.
        positions: keyed draws: ``[B]`` int64 in ``[0, 2**48)``.
        step: keyed draws: the draft step, in ``[0, 2**16)``.

    Returns:
        ``(q, q_x, x)`` with ``q_x = q[x]``.
    """
    check_float_matrix("logits", logits)
    batch, vocab = logits.shape
    check_temperatures(temperatures, batch)
    if top_ks is not None:
        check_index("top_ks", top_ks, shape=(batch,))
    keyed = check_sampling_keys(seeds, positions, step, generator, batch)
    device = common_device(
        logits=logits, temperatures=temperatures, top_ks=top_ks, seeds=seeds, positions=positions
    )
    check_positive_temperatures(temperatures, device)
    if vocab == 0:
        raise ValueError("logits: expected a non-empty vocabulary (V >= 1)")
    check_generator(generator, device)
    specs: list[OutputSpec | None] = [
        ("out[0]", (batch, vocab), torch.float32),
        ("out[1]", (batch, 1), torch.float32),
        ("out[2]", (batch, 1), torch.int64),
    ]
    out_q, out_q_x, out_x = checked_outputs(out, specs, device)
    assert out_q is not None and out_q_x is not None and out_x is not None
    if batch == 0:
        return out_q, out_q_x, out_x
    outs = (out_q, out_q_x, out_x)
    if keyed:
        check_positions(positions, device)  # type: ignore[arg-type]
        op.dispatch(device, logits, temperatures, top_ks, None, seeds, positions, step, *outs)
    else:
        exp_noise = exponential_noise(logits.shape, device, generator)
        op.dispatch(device, logits, temperatures, top_ks, exp_noise, None, None, 0, *outs)
    return out_q, out_q_x, out_x


# --------------------------------------------------------------------------------------------------
# D5 select_top_k_tokens


def _select_top_k_tokens_reference(
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


@define_op(
    _select_top_k_tokens_reference,
    mutates=(
        "out_input_ids",
        "out_hidden",
        "out_scores",
        "out_tree_scores",
        "out_tree_tokens",
        "out_tree_parents",
    ),
    op_class="bandwidth",
    variant=("topk_index",),
    portable_reason="one top-k and two gathers; the hidden-state gather is a torch copy",
)
def select_top_k_tokens(
    op: OpDef,
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
        check_tensor("hidden_states", hidden_states, shape=(rows, ANY_SIZE))
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
    input_ids, hidden, new_scores, tree_scores, tree_tokens, tree_parents = checked_outputs(
        flat_out, specs, device
    )
    assert input_ids is not None and new_scores is not None
    assert tree_scores is not None and tree_tokens is not None and tree_parents is not None
    if batch > 0:
        op.dispatch(
            device, i, topk_p, topk_index, hidden_states, scores, topk,
            input_ids, hidden, new_scores, tree_scores, tree_tokens, tree_parents,
        )  # fmt: skip
    return input_ids, hidden, new_scores, (tree_scores, tree_tokens, tree_parents)


# --------------------------------------------------------------------------------------------------
# Checks of the draft sampling contracts alone


def check_generator(generator: object, device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    if generator.device == device or device_kind(device) == "meta":  # the common case first
        return
    if generator.device.type != device.type:
        raise ValueError(
            f"generator: expected a generator of the tensors' device {device}, got one of {generator.device}"
        )


def exponential_noise(
    shape: Sequence[int], device: torch.device, generator: torch.Generator | None
) -> Tensor:
    """Exp(1) noise of the exponential race, fp32, drawn from ``generator`` (default one when None)."""
    noise = empty(shape, torch.float32, device)
    if generator is None or noise.is_meta:  # meta tensors hold no data: there is nothing to draw
        return noise.exponential_()
    return noise.exponential_(generator=generator)


def check_sampling_keys(
    seeds: object, positions: object, step: object, generator: object, batch: int
) -> bool:
    """Whether a sampling call is keyed (``seeds`` given), after checking the keyword arguments that
    choose between keyed draws and a generator's."""
    if seeds is None:
        if positions is not None:
            raise ValueError("seeds: required with positions= (keyed draws need both)")
        if step != 0:
            raise ValueError(f"step: only keyed draws (seeds=, positions=) take a step, got {step}")
        return False
    if generator is not None:
        raise ValueError("generator: expected None with seeds= (keyed draws touch no generator)")
    if positions is None:
        raise ValueError("positions: required with seeds= (a key is (seed, position, step))")
    check_keys(seeds, positions, batch)
    check_step(step)
    return True


def check_temperatures(temperatures: object, batch: int) -> Tensor:
    return check_tensor("temperatures", temperatures, dtype=torch.float32, shape=(batch, 1))


def check_positive_temperatures(temperatures: Tensor, device: torch.device) -> None:
    # A zero or NaN temperature would make the whole row NaN (sglang maps greedy requests to 1.0).
    # "not > 0" catches NaN, which every comparison rejects.
    if value_checks_enabled(device) and temperatures.numel():
        bad = ~(temperatures > 0)
        if bool(bad.any()):
            raise ValueError(f"temperatures: expected positive values, found {float(temperatures[bad][0])}")
