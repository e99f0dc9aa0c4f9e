"""Family H: load_token_map (local files and an offline Hugging Face cache) and record_stream_each."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import huggingface_hub
import pytest
import torch
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import LocalEntryNotFoundError

import spec_hal.registry
from spec_hal.ops import load_token_map, record_stream_each

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class NotATensor:
    """Pickled by reference: torch.load(weights_only=True) must refuse to build it."""

    def __init__(self) -> None:
        self.ids = [1, 2, 3]


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hugging Face cache in tmp_path; returns a function adding a file to a repo."""
    cache = tmp_path / "hub"
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("SPEC_HAL_USE_MODELSCOPE", raising=False)

    def add(repo_id: str, filename: str, content: object) -> None:
        repo = cache / f"models--{repo_id.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(COMMIT)
        target = repo / "snapshots" / COMMIT / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save(content, target)

    return add


def saved(tmp_path: Path, content: object, name: str = "map.pt") -> Path:
    path = tmp_path / name
    torch.save(content, path)
    return path


@pytest.mark.parametrize(
    "content",
    [torch.tensor([5, 0, 9, 2], dtype=torch.int32), torch.tensor([5, 0, 9, 2]), [5, 0, 9, 2], (5, 0, 9, 2)],
)
def test_local_file(tmp_path, content):
    token_map = load_token_map(saved(tmp_path, content), vocab_size=10)
    assert token_map.dtype == torch.int64 and token_map.device.type == "cpu"
    assert token_map.tolist() == [5, 0, 9, 2]


def test_local_file_as_str_and_device(tmp_path):
    path = saved(tmp_path, torch.arange(4))
    assert load_token_map(str(path)).tolist() == [0, 1, 2, 3]
    on_meta = load_token_map(path, device="meta")
    assert on_meta.device.type == "meta" and on_meta.dtype == torch.int64 and on_meta.shape == (4,)


def test_hub_file_from_the_offline_cache(hub_cache):
    hub_cache("org/eagle-draft", "freq_32768.pt", torch.tensor([3, 1, 2]))
    hub_cache("org/eagle-draft", "maps/hot.pt", [7, 8])
    assert load_token_map("org/eagle-draft/freq_32768.pt").tolist() == [3, 1, 2]
    assert load_token_map("org/eagle-draft/maps/hot.pt", vocab_size=9).tolist() == [7, 8]


def test_missing_repo_or_file_offline(hub_cache):
    hub_cache("org/eagle-draft", "freq_32768.pt", torch.tensor([3, 1, 2]))
    for path in ("org/absent-repo/map.pt", "org/eagle-draft/absent.pt"):
        with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE is set.*hf download") as caught:
            load_token_map(path)
        assert isinstance(caught.value, ValueError)


def test_downloads_only_when_online(hub_cache, tmp_path, monkeypatch):
    downloaded = saved(tmp_path, torch.tensor([4, 2]), "downloaded.pt")
    calls = []

    def fake_download(repo_id, filename, *, cache_dir=None, local_files_only=False):
        calls.append((repo_id, filename, cache_dir, local_files_only))
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        return str(downloaded)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    with pytest.raises(FileNotFoundError):
        load_token_map("org/repo/map.pt")
    assert [call[3] for call in calls] == [True]  # offline: the cache only

    calls.clear()
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    assert load_token_map("org/repo/map.pt").tolist() == [4, 2]
    assert calls == [
        ("org/repo", "map.pt", hf_constants.HF_HUB_CACHE, True),
        ("org/repo", "map.pt", hf_constants.HF_HUB_CACHE, False),
    ]


def test_failed_download_is_explained(hub_cache, monkeypatch):
    def unreachable(repo_id, filename, *, cache_dir=None, local_files_only=False):
        raise LocalEntryNotFoundError("cannot reach the hub")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(FileNotFoundError, match="could not get 'map.pt' from Hugging Face repo 'org/repo'"):
        load_token_map("org/repo/map.pt")


def test_modelscope_requested_but_missing(hub_cache, monkeypatch):
    monkeypatch.setenv("SPEC_HAL_USE_MODELSCOPE", "1")
    monkeypatch.setitem(sys.modules, "modelscope", None)  # an import of it fails, installed or not
    with pytest.raises(ImportError, match="pip install modelscope"):
        load_token_map("org/repo/map.pt")


def test_invalid_repo_id_and_device(tmp_path, hub_cache):
    with pytest.raises(ValueError, match="'org/bad repo' is not a Hugging Face repo id"):
        load_token_map("org/bad repo/map.pt")
    with pytest.raises(ValueError, match="device: expected a torch device"):
        load_token_map(saved(tmp_path, [1]), device="no-such-device")


def test_not_a_file(tmp_path, hub_cache):
    with pytest.raises(ValueError, match="is not a file"):
        load_token_map(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_token_map(tmp_path / "absent.pt")
    with pytest.raises(TypeError, match="path: expected a str"):
        load_token_map(42)


def test_corrupt_files(tmp_path):
    good = saved(tmp_path, torch.arange(100))
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:200])
    for name, data in (("empty.pt", b""), ("text.pt", b"not a tensor\n"), ("random.pt", os.urandom(64))):
        (tmp_path / name).write_bytes(data)
    for name in ("truncated.pt", "empty.pt", "text.pt", "random.pt"):
        with pytest.raises(ValueError, match="is not a readable torch.save file"):
            load_token_map(tmp_path / name)


def test_pickled_objects_are_refused(tmp_path):
    with pytest.raises(ValueError, match="is not plain tensor data"):
        load_token_map(saved(tmp_path, NotATensor()))
    with pytest.raises(ValueError, match="holds dict"):
        load_token_map(saved(tmp_path, {"ids": torch.arange(3)}))


@pytest.mark.parametrize(
    "content, vocab_size, match",
    [
        (torch.tensor([1, 2, 2, 3]), None, "unique; 2 repeats"),
        (torch.tensor([1, -4, 3]), None, "non-negative; found -4"),
        (torch.tensor([1, 2, 10]), 10, "< vocab_size = 10; found 10"),
        (torch.tensor([1.0, 2.0]), None, "expected integer token ids"),
        (torch.tensor([True, False]), None, "expected integer token ids"),
        (torch.tensor([[1, 2], [3, 4]]), None, "expected 1-D"),
        (torch.zeros(0, dtype=torch.int64), None, "holds no token ids"),
        ([1, 2.5], None, "expected a 1-D integer tensor or a list of ints"),
    ],
)
def test_bad_content(tmp_path, content, vocab_size, match):
    with pytest.raises(ValueError, match=match):
        load_token_map(saved(tmp_path, content), vocab_size=vocab_size)


def test_bad_vocab_size(tmp_path):
    with pytest.raises(ValueError, match="vocab_size: expected an int >= 1"):
        load_token_map(saved(tmp_path, [1]), vocab_size=0)


def test_record_stream_each_skips_none_and_host_tensors(monkeypatch):
    def no_vendor(device_type):
        raise AssertionError(f"record_stream_each looked up a vendor for {device_type}")

    monkeypatch.setattr(spec_hal.registry, "vendor_for", no_vendor)
    record_stream_each([None, torch.zeros(2), torch.zeros(2, device="meta"), None], stream=object())
    record_stream_each(iter([]), stream=None)
