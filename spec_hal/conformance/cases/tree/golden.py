"""Family C's golden conformance cases: hand-built trees with exact expected values."""

from __future__ import annotations

import torch

from ...case import Case
from .builders import poisoned_tensor

# The tree of the golden cases: K = 2, S = 2, D = 5.
#   step 0 scores (flat 0, 1); step 1 expands node 0 (flat 2, 3) and node 1 (flat 4, 5).
#   selected = [0, 1, 2, 4] -> nodes 1..4; parent_list = [-1, 0, 1] (slot 1 -> flat 0, slot 2 -> flat 1)
#   node 1 (flat 0) and node 2 (flat 1) are root children; node 3 (flat 2) under node 1, node 4 (flat 4)
#   under node 2.
_GOLDEN_PARENTS = [[-1, 0, 1]]
_GOLDEN_SELECTED = [[0, 1, 2, 4]]


def _golden_build(mode: int, parent_list=_GOLDEN_PARENTS):
    def build(device):
        kwargs = {
            "parent_list": torch.tensor(parent_list, device=device),
            "selected_index": torch.tensor(_GOLDEN_SELECTED, device=device),
            "seq_lens": torch.tensor([3], device=device),
            "topk": 2,
            "num_steps": 2,
            "draft_token_num": 5,
            "tree_mask_mode": mode,
            "positions": poisoned_tensor((5,), torch.int64, device),
            "retrieve_index": poisoned_tensor((1, 5), torch.int64, device),
            "retrieve_next_token": torch.full((1, 5), -1, dtype=torch.int64, device=device),
            "retrieve_next_sibling": torch.full((1, 5), -1, dtype=torch.int64, device=device),
        }
        if mode == 0:
            kwargs["tree_mask"] = torch.zeros(3 * 5 + 25 + 2, dtype=torch.bool, device=device)
        elif mode == 1:
            kwargs["tree_mask"] = torch.ones(25, dtype=torch.bool, device=device)
        else:
            kwargs["tree_mask"] = torch.zeros(5, dtype=torch.uint8, device=device)
        return kwargs

    return build


_GOLDEN_ROWS = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]]


def _golden_expected(mode: int):
    def expected():
        rows = torch.tensor(_GOLDEN_ROWS, dtype=torch.bool)
        if mode == 0:
            mask = torch.zeros(42, dtype=torch.bool)
            for i in range(5):
                mask[i * 8 + 3 : i * 8 + 8] = rows[i]
        elif mode == 1:
            mask = rows.flatten()
        else:
            mask = torch.tensor([1, 3, 5, 11, 21], dtype=torch.uint8)
        return {
            "tree_mask": mask,
            "positions": torch.tensor([3, 4, 4, 5, 5]),
            "retrieve_index": torch.tensor([[0, 1, 2, 3, 4]]),
            "retrieve_next_token": torch.tensor([[1, 3, 4, -1, -1]]),
            "retrieve_next_sibling": torch.tensor([[-1, 2, -1, -1, -1]]),
        }

    return expected


def _golden_malformed_expected():
    # parent_list slot 2 points at flat 9, which is not selected: node 4 is INVALID (no links; its
    # mask row holds the root and itself; depth 1).
    result = _golden_expected(1)()
    result["tree_mask"] = torch.tensor(_GOLDEN_ROWS[:4] + [[1, 0, 0, 0, 1]], dtype=torch.bool).flatten()
    result["positions"] = torch.tensor([3, 4, 4, 5, 4])
    result["retrieve_next_token"] = torch.tensor([[1, 3, -1, -1, -1]])
    return result


def _golden_greedy(device):
    # Tree of the build golden; tokens: root 10, node1 20, node2 21, node3 30, node4 31.
    # Target: after the root 21 (node 2, the second sibling), after node 2 31 (node 4), after node 4 99.
    return {
        "predicts": torch.zeros(5, dtype=torch.int32, device=device),
        "accept_index": torch.full((1, 3), -1, dtype=torch.int32, device=device),
        "num_correct_drafts": poisoned_tensor((1,), torch.int32, device),
        "candidates": torch.tensor([[10, 20, 21, 30, 31]], device=device),
        "retrieve_index": torch.tensor([[0, 1, 2, 3, 4]], device=device),
        "retrieve_next_token": torch.tensor([[1, 3, 4, -1, -1]], device=device),
        "retrieve_next_sibling": torch.tensor([[-1, 2, -1, -1, -1]], device=device),
        "target_predict": torch.tensor([[21, 7, 31, 8, 99]], device=device),
    }


def _golden_greedy_expected():
    return {
        "predicts": torch.tensor([21, 0, 31, 0, 99], dtype=torch.int32),
        "accept_index": torch.tensor([[0, 2, 4]], dtype=torch.int32),
        "num_correct_drafts": torch.tensor([2], dtype=torch.int32),
    }


def _golden_sampling(device):
    # Same tree, V = 4. Root children tokens 1 (node 1), 2 (node 2); coin 0.6:
    # acc after token 1 = 0.25 < 0.6 (rejected: draft_probs[0, 0, 1] = 0.25), after token 2 = 0.75 >= 0.6:
    # node 2 accepted. Node 2's child node 4 (token 3): coin 0.9 > p = 0.5: rejected
    # (draft_probs[0, 2, 3] = 0.5). Bonus from relu(target[2] - draft[2]) = [0.25, 0.25, 0, 0],
    # coin 0.7 * 0.5 = 0.35 -> running sums 0.25, 0.5: token 1.
    kwargs = _golden_greedy(device)
    del kwargs["target_predict"]
    kwargs["candidates"] = torch.tensor([[0, 1, 2, 0, 3]], device=device)
    target = torch.full((1, 5, 4), 0.25)
    target[0, 0] = torch.tensor([0.25, 0.25, 0.5, 0.0])
    target[0, 2] = torch.tensor([0.25, 0.25, 0.0, 0.5])
    kwargs.update(
        uniform_samples=torch.tensor([[0.6, 0.1, 0.9, 0.1, 0.1]], device=device),
        uniform_samples_for_final_sampling=torch.tensor([0.7], device=device),
        target_probs=target.to(device),
        draft_probs=torch.zeros(1, 5, 4, device=device),
    )
    return kwargs


def _golden_sampling_expected():
    draft = torch.zeros(1, 5, 4)
    draft[0, 0, 1] = 0.25
    draft[0, 2, 3] = 0.5
    return {
        "predicts": torch.tensor([2, 0, 1, 0, 0], dtype=torch.int32),
        "accept_index": torch.tensor([[0, 2, -1]], dtype=torch.int32),
        "num_correct_drafts": torch.tensor([1], dtype=torch.int32),
        "draft_probs": draft,
    }


def _golden_zero_thresholds(device):
    # Same tree, V = 4, thresholds (0, 0) as sglang's own test uses them: only threshold_acc is
    # clamped, so a child of target probability 0 is accepted (p >= threshold_single = 0). Node 1
    # (token 1, p = 0 under the root) is accepted, then node 3 (token 3, p = 0 under node 1): all
    # W - 1 accepted, the bonus is sampled from node 3's target row [0, 0, 0.25, 0.75] with coin
    # 0.7 -> token 3. (Clamping threshold_single too would reject node 1 and accept node 2.)
    kwargs = _golden_sampling(device)
    kwargs["candidates"] = torch.tensor([[0, 1, 2, 3, 0]], device=device)
    target = torch.full((1, 5, 4), 0.25)
    target[0, 0] = torch.tensor([0.5, 0.0, 0.5, 0.0])
    target[0, 1] = torch.tensor([0.25, 0.25, 0.5, 0.0])
    target[0, 3] = torch.tensor([0.0, 0.0, 0.25, 0.75])
    kwargs.update(target_probs=target.to(device), threshold_single=0.0, threshold_acc=0.0)
    return kwargs


def _golden_zero_thresholds_expected():
    return {
        "predicts": torch.tensor([1, 3, 0, 3, 0], dtype=torch.int32),
        "accept_index": torch.tensor([[0, 1, 3]], dtype=torch.int32),
        "num_correct_drafts": torch.tensor([2], dtype=torch.int32),
        "draft_probs": torch.zeros(1, 5, 4),
    }


def _golden_chain(device):
    # D = 3, V = 4. Step 1: x = 2, p = 0.5, q = 0.25, coin 0.9: 0.225 < 0.5 accepted.
    # Step 2: x = 1, p = 0.125, q = 0.5, coin 0.5: 0.25 >= 0.125 rejected. Residual row 1:
    # relu([0.5, 0.125, 0.25, 0.125] - [0, 0.5, 0.25, 0.25]) = [0.5, 0, 0, 0] -> token 0.
    return {
        "predicts": torch.zeros(3, dtype=torch.int32, device=device),
        "accept_index": torch.full((1, 3), -1, dtype=torch.int32, device=device),
        "num_correct_drafts": poisoned_tensor((1,), torch.int32, device),
        "candidates": torch.tensor([[3, 2, 1]], device=device),
        "retrieve_index": torch.tensor([[0, 1, 2]], device=device),
        "uniform_samples": torch.tensor([[0.9, 0.5, 0.0]], device=device),
        "uniform_samples_for_final_sampling": torch.tensor([0.3], device=device),
        "target_probs": torch.tensor(
            [[[0.25, 0.25, 0.5, 0.0], [0.5, 0.125, 0.25, 0.125], [0.25, 0.25, 0.25, 0.25]]], device=device
        ),
        "draft_probs": torch.tensor([[[0.25, 0.25, 0.25, 0.25], [0.0, 0.5, 0.25, 0.25]]], device=device),
    }


def _golden_chain_expected():
    return {
        "predicts": torch.tensor([2, 0, 0], dtype=torch.int32),
        "accept_index": torch.tensor([[0, 1, -1]], dtype=torch.int32),
        "num_correct_drafts": torch.tensor([1], dtype=torch.int32),
    }


def _golden_reconstruct(device):
    return {
        "tree_mask": torch.tensor(_GOLDEN_ROWS, dtype=torch.bool, device=device).flatten(),
        "seq_lens": torch.tensor([3], device=device),
        "draft_token_num": 5,
    }


def _golden_reconstruct_expected():
    expected = _golden_expected(1)()
    del expected["tree_mask"]
    return {"result": tuple(expected.values())}


def _golden_pack(device):
    return {
        "draft_tree_mask": torch.tensor(
            [[1, 0], [1, 1], [1, 0], [0, 1]], dtype=torch.bool, device=device
        ).flatten(),
        "seq_lens": torch.tensor([1, 2], device=device),
        "draft_token_num": 2,
        "full_mask": torch.zeros(2 * 3 + 8 + 2, dtype=torch.bool, device=device),
    }


def _golden_pack_expected():
    # request 0 rows: [1 | 1 0], [1 | 1 1]; request 1 rows: [1 1 | 1 0], [1 1 | 0 1]; 2 spare entries.
    bits = [1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0]
    return {"full_mask": torch.tensor(bits, dtype=torch.bool)}


def _golden_organize(device):
    # K = 2, S = 2: flat scores [0.9, 0.5 | 0.6, 0.2, 0.45, 0.4]; D = 4: best three 0.9, 0.6, 0.5.
    return {
        "score_list": [
            torch.tensor([[[0.9, 0.5]]], device=device),
            torch.tensor([[[0.6, 0.2], [0.45, 0.4]]], device=device),
        ],
        "token_list": [
            torch.tensor([[11, 12]], device=device),
            torch.tensor([[21, 22, 23, 24]], device=device),
        ],
        "parents_list": [torch.tensor([[-1, 0, 1]], device=device), torch.tensor([[2, 4]], device=device)],
        "draft_token_num": 4,
    }


def _golden_organize_expected():
    return {"result": (torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([[11, 12, 21]]))}


def _golden_bonus(device):
    return {
        "accept_tokens": torch.tensor([[5, 6, 7], [8, 9, 10]], device=device),
        "accept_lens": torch.tensor([3, 1], device=device),
    }


def golden_cases() -> list[Case]:
    golden = [
        Case(
            "build_tree_kernel_efficient",
            f"golden_mode{m}",
            "golden",
            _golden_build(m),
            _golden_expected(m),
            True,
        )
        for m in (0, 1, 2)
    ]
    golden += [
        Case(
            "build_tree_kernel_efficient",
            "golden_malformed",
            "golden",
            _golden_build(1, parent_list=[[-1, 0, 9]]),
            _golden_malformed_expected,
            True,
        ),
        Case("verify_tree_greedy", "golden", "golden", _golden_greedy, _golden_greedy_expected, True),
        Case(
            "tree_speculative_sampling_target_only",
            "golden",
            "golden",
            _golden_sampling,
            _golden_sampling_expected,
            True,
        ),
        Case(
            "tree_speculative_sampling_target_only",
            "golden_zero_thresholds",
            "golden",
            _golden_zero_thresholds,
            _golden_zero_thresholds_expected,
            True,
        ),
        Case("chain_speculative_sampling", "golden", "golden", _golden_chain, _golden_chain_expected, True),
        Case(
            "reconstruct_indices_from_tree_mask",
            "golden",
            "golden",
            _golden_reconstruct,
            _golden_reconstruct_expected,
            True,
        ),
        Case("pack_ngram_full_mask", "golden", "golden", _golden_pack, _golden_pack_expected, True),
        Case("organize_draft_results", "golden", "golden", _golden_organize, _golden_organize_expected, True),
        Case(
            "fill_bonus_tokens",
            "golden",
            "golden",
            _golden_bonus,
            lambda: {"result": torch.tensor([7, 8], dtype=torch.int32)},
            True,
        ),
    ]
    return golden
