"""Family B (KV movement): the public ops against the loop oracle, goldens, bad cases, meta, compile."""

from __future__ import annotations

import pytest
import torch
from oracles import kv as oracle

import spec_hal.ops as ops
from spec_hal.conformance import grid
from spec_hal.conformance.cases import kv as kv_cases
from spec_hal.ops import KVBuffers, move_accept_tokens_to_target_kvcache, move_kv_cache

CPU = torch.device("cpu")
CASES = kv_cases.cases()


def _cases(op: str, *kinds: str) -> list:
    return [
        pytest.param(case, id=f"{case.kind}:{case.name}")
        for case in CASES
        if case.op == op and case.kind in kinds
    ]


def _kv_list(kv) -> list[KVBuffers]:
    return [kv] if isinstance(kv, KVBuffers) else list(kv)


def _buffers(kv) -> list[torch.Tensor]:
    return [buffer for item in _kv_list(kv) for buffer in item.buffers]


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """Same-width integer view: exact comparison, NaN payloads included."""
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().view(as_int)


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(_bits(actual), _bits(expected))


def _index_args(kwargs: dict, outputs: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """The read-only tensor arguments, cloned (to check they are not mutated)."""
    return {
        name: value.clone()
        for name, value in kwargs.items()
        if isinstance(value, torch.Tensor) and name not in outputs
    }


def _assert_unchanged(kwargs: dict, before: dict[str, torch.Tensor]) -> None:
    for name, value in before.items():
        assert torch.equal(kwargs[name], value), f"{name} was mutated"


# --------------------------------------------------------------------------------------------------
# move_kv_cache


@pytest.mark.parametrize("case", _cases("move_kv_cache", "random", "edge"))
def test_move_kv_cache_matches_oracle(case):
    kwargs = case.build(CPU)
    expected = [buffer.clone() for buffer in _buffers(kwargs["kv"])]
    segments = None if kwargs["segment_lens"] is None else kwargs["segment_lens"].tolist()
    oracle.move_kv_cache(expected, kwargs["tgt_loc"].tolist(), kwargs["src_loc"].tolist(), segments)
    before = _index_args(kwargs)
    result = ops.move_kv_cache(**kwargs)
    assert result is kwargs["kv"]
    for actual, wanted in zip(_buffers(kwargs["kv"]), expected, strict=True):
        assert_same_bits(actual, wanted)
    _assert_unchanged(kwargs, before)


@pytest.mark.parametrize(
    "case", _cases("move_kv_cache", "golden") + _cases("move_accept_tokens_to_target_kvcache", "golden")
)
def test_golden(case):
    kwargs = case.build(CPU)
    result = getattr(ops, case.op)(**kwargs)
    expected = case.expected()
    for actual, wanted in zip(_buffers(kwargs["kv"]), expected["kv"], strict=True):
        assert_same_bits(actual, wanted)
    for name, wanted in expected.items():
        if name == "result":
            assert all(torch.equal(a, w) for a, w in zip(result, wanted, strict=True))
        elif name != "kv":
            assert torch.equal(kwargs[name], wanted), name


def test_masked_lanes_leave_rows_untouched():
    """Rows named only by skipped lanes (either side -1) or out of every lane keep their bits, NaN included."""
    rows = torch.full((6, 8), float("nan"), dtype=torch.bfloat16)
    rows[1] = 1.0
    kv = KVBuffers([rows])
    before = rows.clone()
    ops.move_kv_cache(kv, torch.tensor([2, -1, 3]), torch.tensor([-1, 1, 1]))
    assert_same_bits(rows[3], before[1])
    for slot in (0, 1, 2, 4, 5):
        assert_same_bits(rows[slot], before[slot])
    ops.move_kv_cache(kv, torch.tensor([-1, -1], dtype=torch.int32), torch.tensor([-1, 4], dtype=torch.int32))
    assert_same_bits(rows[torch.tensor([0, 1, 2, 4, 5])], before[torch.tensor([0, 1, 2, 4, 5])])


def test_cycle_within_a_segment_is_read_before_write():
    kv = KVBuffers([torch.arange(5.0)[:, None].repeat(1, 4)])
    ops.move_kv_cache(kv, torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0]))
    assert kv.buffers[0][:, 0].tolist() == [1.0, 2.0, 3.0, 0.0, 4.0]


def test_move_kv_cache_list_of_kvbuffers_shares_lanes():
    args = kv_cases.build_move_kv_cache(CPU, bs=6, with_scales=True, seed=3)
    assert isinstance(args["kv"], list) and len(args["kv"]) == 2
    expected = [buffer.clone() for buffer in _buffers(args["kv"])]
    oracle.move_kv_cache(
        expected, args["tgt_loc"].tolist(), args["src_loc"].tolist(), args["segment_lens"].tolist()
    )
    assert ops.move_kv_cache(**args) is args["kv"]
    for actual, wanted in zip(_buffers(args["kv"]), expected, strict=True):
        assert_same_bits(actual, wanted)


def test_move_kv_cache_mixed_index_dtypes():
    args = kv_cases.build_move_kv_cache(CPU, bs=7, seed=5)
    expected = [buffer.clone() for buffer in _buffers(args["kv"])]
    oracle.move_kv_cache(
        expected, args["tgt_loc"].tolist(), args["src_loc"].tolist(), args["segment_lens"].tolist()
    )
    ops.move_kv_cache(args["kv"], args["tgt_loc"].int(), args["src_loc"], args["segment_lens"].int())
    for actual, wanted in zip(_buffers(args["kv"]), expected, strict=True):
        assert_same_bits(actual, wanted)


# --------------------------------------------------------------------------------------------------
# move_accept_tokens_to_target_kvcache


def _accept_oracle_args(kwargs: dict) -> tuple:
    return (
        kwargs["req_pool_indices"].tolist(),
        kwargs["req_to_token"],
        kwargs["seq_lens"].tolist(),
        kwargs["num_correct_drafts"].tolist(),
        kwargs["accept_index"].tolist(),
        kwargs["out_cache_loc"].tolist(),
    )


@pytest.mark.parametrize("case", _cases("move_accept_tokens_to_target_kvcache", "random", "edge"))
def test_move_accept_tokens_matches_oracle(case):
    kwargs = case.build(CPU)
    expected = [buffer.clone() for buffer in _buffers(kwargs["kv"])]
    tgt, src = oracle.move_accept_tokens_to_target_kvcache(expected, *_accept_oracle_args(kwargs))
    before = _index_args(kwargs, outputs=("tgt_loc", "src_loc"))
    result = ops.move_accept_tokens_to_target_kvcache(**kwargs)
    assert result[0] is kwargs["tgt_loc"] and result[1] is kwargs["src_loc"]
    assert kwargs["tgt_loc"].tolist() == tgt and kwargs["src_loc"].tolist() == src  # no poison left
    for actual, wanted in zip(_buffers(kwargs["kv"]), expected, strict=True):
        assert_same_bits(actual, wanted)
    _assert_unchanged(kwargs, before)


def test_move_accept_tokens_allocates_outputs_and_mixes_index_dtypes():
    kwargs = kv_cases.build_move_accept_tokens_to_target_kvcache(CPU, bs=5, topk=2, seed=9)
    expected = [buffer.clone() for buffer in _buffers(kwargs["kv"])]
    tgt, src = oracle.move_accept_tokens_to_target_kvcache(expected, *_accept_oracle_args(kwargs))
    del kwargs["tgt_loc"], kwargs["src_loc"]
    for name in ("req_pool_indices", "num_correct_drafts", "out_cache_loc"):
        kwargs[name] = kwargs[name].int()
    got_tgt, got_src = ops.move_accept_tokens_to_target_kvcache(**kwargs)
    assert got_tgt.dtype == got_src.dtype == torch.int64
    assert got_tgt.tolist() == tgt and got_src.tolist() == src
    for actual, wanted in zip(_buffers(kwargs["kv"]), expected, strict=True):
        assert_same_bits(actual, wanted)


def test_move_accept_tokens_masks_out_of_range_lanes_in_the_reference():
    """Without value checks (accelerators), bad indices become -1 lanes: nothing read or written out of bounds."""
    req_to_token = torch.arange(8, dtype=torch.int32).view(2, 4)
    tgt = torch.full((6,), grid.POISON_INT)
    src = torch.full((6,), grid.POISON_INT)
    move_accept_tokens_to_target_kvcache.reference(
        torch.tensor([5, 0]),  # row 5 does not exist
        req_to_token,
        torch.tensor([0, 3]),  # request 1: column 3 + 1 is past the pool
        torch.tensor([2, 1]),
        torch.tensor([[0, 1, 9], [3, 4, -1]]),  # 9 is past out_cache_loc
        torch.tensor([7, 6, 5, 4, 3, 2]),
        tgt,
        src,
    )
    assert tgt.tolist() == [-1, -1, -1, 3, -1, -1]
    assert src.tolist() == [-1, -1, -1, 4, -1, -1]


# --------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    "bad", [pytest.param(bad, id=f"{bad.op}:{bad.name}") for bad in kv_cases.bad_cases()]
)
def test_bad_case(bad):
    kwargs = bad.build(CPU)
    with pytest.raises(bad.error, match=bad.match):
        getattr(ops, bad.op)(**kwargs)


def test_value_errors_leave_buffers_untouched():
    args = kv_cases._golden_move_build(CPU)
    before = [buffer.clone() for buffer in args["kv"].buffers]
    with pytest.raises(ValueError, match="src_loc"):
        ops.move_kv_cache(args["kv"], args["tgt_loc"], torch.tensor([2, 3, 4, 6, 2]), args["segment_lens"])
    for actual, wanted in zip(args["kv"].buffers, before, strict=True):
        assert torch.equal(actual, wanted)


def test_kvbuffers_attributes():
    fused = torch.zeros(10, 2, 3, 8, dtype=torch.float16)
    kv = KVBuffers([fused[:, 0], fused[:, 1]])
    assert kv.num_slots == 10 and kv.row_bytes == 3 * 8 * 2 and len(kv) == 2
    assert kv.ptr_table.dtype == torch.int64 and kv.ptr_table.tolist() == [
        fused[:, 0].data_ptr(),
        fused[:, 1].data_ptr(),
    ]
    assert kv.vectorizable
    assert not KVBuffers([torch.zeros(4, 3)]).vectorizable  # 12-byte rows
    assert not KVBuffers([torch.zeros(20).as_strided((4, 4), (5, 1))]).vectorizable  # 20-byte slot stride
    assert not KVBuffers([torch.zeros(4 * 8 + 1)[1:].view(4, 8)]).vectorizable  # 4-byte aligned buffer


def test_vectorizable_is_part_of_the_move_variant():
    for vectorizable in (True, False):
        kv = KVBuffers([torch.zeros(4, 4 if vectorizable else 3)])
        variant = move_kv_cache.variant_of(
            [
                kv.buffers,
                kv.ptr_table,
                kv.vectorizable,
                torch.zeros(1, dtype=torch.int32),
                torch.zeros(1, dtype=torch.int64),
                None,
            ]
        )
        assert variant == (torch.int32, torch.int64, None, vectorizable)


def _shifted_views() -> list[torch.Tensor]:
    shared = torch.zeros(5, 2)
    return [shared[:-1], shared[1:]]


@pytest.mark.parametrize(
    ("buffers", "error", "match"),
    [
        ([], ValueError, "buffers"),
        (torch.zeros(4, 2), TypeError, "buffers"),
        ([torch.zeros(4, 2), torch.zeros(4, 3)], ValueError, r"buffers\[1\]"),
        ([torch.zeros(4, 2), torch.zeros(4, 2, dtype=torch.float16)], TypeError, r"buffers\[1\]"),
        ([torch.zeros(())], ValueError, r"buffers\[0\]"),
        ([torch.zeros(2, 4).t()], ValueError, "contiguous"),
        ([torch.zeros(10).as_strided((4, 4), (2, 1))], ValueError, "overlap"),
        ([torch.zeros(4, 2)] * 2, ValueError, "twice"),
        ([torch.zeros(4, 2), torch.zeros(5, 2)[1:]], None, None),  # a control: distinct memory
        # views that share rows without sharing a start: row i of one is row i - 1 of the other
        (_shifted_views(), ValueError, r"buffers\[0\] and buffers\[1\] overlap \(they share memory\)"),
    ],
)
def test_kvbuffers_rejects(buffers, error, match):
    if error is None:
        KVBuffers(buffers)
        return
    with pytest.raises(error, match=match):
        KVBuffers(buffers)


def _ramp(num_slots: int = 8) -> torch.Tensor:
    return torch.arange(float(num_slots))[:, None].repeat(1, 4)


@pytest.mark.parametrize("second", ["same_object", "same_tensor", "a_view_of_it"])
def test_kvbuffers_listed_twice_are_refused_before_anything_moves(second):
    rows = _ramp()
    kv = KVBuffers([rows])
    other = {
        "same_object": lambda: kv,
        "same_tensor": lambda: KVBuffers([rows]),
        "a_view_of_it": lambda: KVBuffers([rows[2:6]]),
    }[second]()
    with pytest.raises(ValueError, match=r"kv: kv\[0\] and kv\[1\]"):
        move_kv_cache(
            [kv, other], torch.tensor([5, 6]), torch.tensor([6, 5])
        )  # a swap, done twice, undoes itself
    assert torch.equal(rows, _ramp())


def test_k_and_v_views_of_one_fused_tensor_may_be_separate_kvbuffers_of_a_list():
    fused = torch.arange(8.0)[:, None, None].repeat(1, 2, 4)
    fused[:, 1] += 100
    kv = [KVBuffers([fused[:, 0]]), KVBuffers([fused[:, 1]])]  # interleaved rows, no shared byte
    for _ in range(2):  # the second call takes the cached answer for this list
        move_kv_cache(kv, torch.tensor([5, 6]), torch.tensor([6, 5]))
    assert fused[:, 0, 0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]  # swapped twice: back in place
    assert fused[:, 1, 0].tolist() == [100 + s for s in range(8)]


@pytest.mark.parametrize("segmented", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_lanes_repeating_a_move_give_the_move_without_them(segmented, seed):
    gen = torch.Generator().manual_seed(seed)
    num_slots, lanes = 32, 10
    slots = torch.randperm(num_slots, generator=gen)
    tgt, src = slots[:lanes].clone(), slots[lanes : 2 * lanes].clone()
    repeats = torch.randint(0, lanes, (6,), generator=gen)
    padded_tgt = torch.cat([tgt, tgt[repeats], torch.zeros(4, dtype=torch.int64)])  # sglang pads 0 -> 0
    padded_src = torch.cat([src, src[repeats], torch.zeros(4, dtype=torch.int64)])
    order = torch.randperm(padded_tgt.numel(), generator=gen)
    segment_lens = torch.tensor([padded_tgt.numel()]) if segmented else None
    expected, actual = _ramp(num_slots), _ramp(num_slots)
    move_kv_cache(KVBuffers([expected]), tgt, src)
    move_kv_cache(KVBuffers([actual]), padded_tgt[order], padded_src[order], segment_lens)
    assert torch.equal(actual, expected)


def test_one_target_with_two_sources_is_still_refused():
    rows = _ramp()
    with pytest.raises(
        ValueError, match="tgt_loc: slot 0 is the target of more than one lane, with different sources"
    ):
        move_kv_cache(KVBuffers([rows]), torch.tensor([1, 0, 0]), torch.tensor([2, 0, 3]))
    assert torch.equal(rows, _ramp())


def test_self_moves_in_several_segments_do_not_count_as_segment_overlap():
    rows = _ramp()
    # segment 0 reads slot 0 while segment 1 writes slot 0 with its own bytes (a 0 -> 0 pad lane)
    move_kv_cache(
        KVBuffers([rows]), torch.tensor([3, 0, 0, 4]), torch.tensor([0, 0, 0, 5]), torch.tensor([2, 2])
    )
    assert rows[:, 0].tolist() == [0, 1, 2, 0, 5, 5, 6, 7]


# --------------------------------------------------------------------------------------------------
# Meta tensors and torch.compile


def _to_meta(kwargs: dict) -> dict:
    converted = {}
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            converted[name] = value.to("meta")
        elif isinstance(value, (KVBuffers, list)):
            items = [KVBuffers([buffer.to("meta") for buffer in item.buffers]) for item in _kv_list(value)]
            converted[name] = items[0] if isinstance(value, KVBuffers) else items
        else:
            converted[name] = value
    return converted


@pytest.mark.parametrize(
    ("op", "opdefs"),
    [
        ("move_kv_cache", (move_kv_cache,)),
        ("move_accept_tokens_to_target_kvcache", (move_accept_tokens_to_target_kvcache, move_kv_cache)),
    ],
)
def test_meta_runs_the_portable_reference(op, opdefs):
    kwargs = _to_meta(kv_cases.BUILDERS[op](CPU, bs=3, idx_dtype=torch.int32, with_scales=True))
    for opdef in opdefs:
        opdef.clear_bindings()
    getattr(ops, op)(**kwargs)
    for opdef in opdefs:
        bound = [fn for (device, _), fn in opdef._bound.items() if device.type == "meta"]
        assert bound and all(fn is opdef.reference for fn in bound)


def test_compiled_move_kv_cache_matches_eager():
    eager = kv_cases.build_move_kv_cache(CPU, bs=4, seed=1, fused=True)
    compiled = kv_cases.build_move_kv_cache(CPU, bs=4, seed=1, fused=True)

    def step(kv, tgt_loc, src_loc, segment_lens):
        ops.move_kv_cache(kv, tgt_loc, src_loc, segment_lens)
        return kv.buffers[0].float().sum()  # a read after the op must see its writes

    torch._dynamo.reset()
    total = torch.compile(step, fullgraph=True, backend="aot_eager")(**compiled)
    assert torch.equal(total, step(**eager))
    for actual, wanted in zip(compiled["kv"].buffers, eager["kv"].buffers, strict=True):
        assert_same_bits(actual, wanted)


def test_accept_move_segments_are_made_once_and_never_under_capture(monkeypatch):
    import spec_hal.ops.kv as kv_ops

    monkeypatch.setattr(kv_ops, "_UNIFORM_SEGMENT_LENS", {})
    cpu = torch.device("cpu")
    first = kv_ops._uniform_segment_lens(cpu, 5, 4)
    assert first.tolist() == [4] * 5 and first.dtype == torch.int64
    assert kv_ops._uniform_segment_lens(cpu, 5, 4) is first  # no fill launch on later calls
    assert kv_ops._uniform_segment_lens(cpu, 5, 3) is not first
    monkeypatch.setattr(kv_ops, "is_capturing", lambda device: True)
    captured = kv_ops._uniform_segment_lens(cpu, 7, 4)
    assert captured.tolist() == [4] * 7
    assert (cpu, 7, 4) not in kv_ops._UNIFORM_SEGMENT_LENS  # the graph's pool owns it
