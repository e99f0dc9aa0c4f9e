"""Family H: load_token_map (local files and an offline Hugging Face cache) and record_stream_each."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
import torch

import spec_hal.registry
from spec_hal.ops import host, load_token_map, record_stream_each

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class NotATensor:
    """Pickled by reference: torch.load(weights_only=True) must refuse to build it."""

    def __init__(self) -> None:
        self.ids = [1, 2, 3]


@pytest.fixture
def hf_constants():
    return pytest.importorskip("huggingface_hub.constants")  # the optional extra spec-hal[hub]


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, hf_constants):
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


def fake_hub(monkeypatch, downloaded: Path | None) -> list[tuple]:
    """Replace hf_hub_download: nothing is cached; a download returns ``downloaded`` (None: fails as
    an unreachable hub does). Returns the list of calls made."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    calls = []

    def fake_download(repo_id, filename, *, cache_dir=None, local_files_only=False):
        calls.append((repo_id, filename, cache_dir, local_files_only))
        if local_files_only or downloaded is None:
            raise LocalEntryNotFoundError("not cached" if local_files_only else "cannot reach the hub")
        return str(downloaded)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    return calls


def hub_answers(monkeypatch) -> None:
    monkeypatch.setattr(host, "_unreachable", lambda endpoint: None)


def test_downloads_only_when_online(hub_cache, hf_constants, tmp_path, monkeypatch):
    calls = fake_hub(monkeypatch, saved(tmp_path, torch.tensor([4, 2]), "downloaded.pt"))
    hub_answers(monkeypatch)
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


def test_failed_download_is_explained(hub_cache, hf_constants, monkeypatch):
    fake_hub(monkeypatch, None)
    hub_answers(monkeypatch)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(
        FileNotFoundError, match="as Hugging Face repo 'org/repo', file 'map.pt', could not get it"
    ):
        load_token_map("org/repo/map.pt")


def test_an_unreachable_hub_fails_at_once_naming_both_readings(hub_cache, hf_constants, monkeypatch):
    calls = fake_hub(monkeypatch, None)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    for var in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    probed = []

    def no_route(address, timeout=None, *args, **kwargs):
        probed.append((address, timeout))
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", no_route)
    with pytest.raises(FileNotFoundError) as caught:
        load_token_map("org/repo/map.pt")
    message = str(caught.value)
    assert f"no local file {os.path.abspath('org/repo/map.pt')}" in message
    assert "as Hugging Face repo 'org/repo', file 'map.pt'" in message
    hub = hf_constants.ENDPOINT.split("://")[1].split("/")[0]
    assert f"offline (cannot connect to {hub}:443: Network is unreachable)" in message
    assert [call[3] for call in calls] == [True]  # the cache only: no download with its retries
    assert probed == [((hub, 443), host.HUB_PROBE_SECONDS)]


def test_hf_hub_offline_names_both_readings(hub_cache):
    with pytest.raises(FileNotFoundError, match="no local file .*org/repo/map.pt; as Hugging Face repo"):
        load_token_map("org/repo/map.pt")


def test_without_huggingface_hub_the_extra_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("SPEC_HAL_USE_MODELSCOPE", raising=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # an import of it fails, installed or not
    with pytest.raises(
        FileNotFoundError, match=r"no local file .*needs huggingface_hub: pip install \"spec-hal\[hub\]\""
    ) as caught:
        load_token_map("org/repo/map.pt")
    assert isinstance(caught.value, ValueError)
    assert load_token_map(saved(tmp_path, [3, 1])).tolist() == [3, 1]  # local files need no hub


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
    with pytest.raises(FileNotFoundError, match="no local file .*absent.pt"):
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


@pytest.mark.parametrize(
    "content, match",
    [
        (torch.tensor([1, 2, 3]).to_sparse(), "holds a torch.sparse_coo tensor"),
        (torch.zeros(3, dtype=torch.int64, device="meta"), "holds a meta tensor"),
        (torch.tensor([1, 2], dtype=torch.uint64), "holds a torch.uint64 tensor"),
    ],
)
def test_tensors_without_plain_ids_are_value_errors(tmp_path, content, match):
    with pytest.raises(ValueError, match=match):
        load_token_map(saved(tmp_path, content))


def test_a_device_this_torch_lacks_is_a_value_error(tmp_path):
    missing = next((kind for kind in ("cuda", "xpu", "mps") if not getattr(torch, kind).is_available()), None)
    if missing is None:
        pytest.skip("cuda, xpu and mps are all available here")
    with pytest.raises(ValueError, match=f"device: cannot place the token map on {missing}:0"):
        load_token_map(saved(tmp_path, [1, 2]), device=f"{missing}:0")


def test_bad_vocab_size(tmp_path):
    with pytest.raises(ValueError, match="vocab_size: expected an int >= 1"):
        load_token_map(saved(tmp_path, [1]), vocab_size=0)


def test_record_stream_each_skips_none_and_host_tensors(monkeypatch):
    def no_vendor(device_type):
        raise AssertionError(f"record_stream_each looked up a vendor for {device_type}")

    monkeypatch.setattr(spec_hal.registry, "vendor_for", no_vendor)
    record_stream_each([None, torch.zeros(2), torch.zeros(2, device="meta"), None], stream=object())
    record_stream_each(iter([]), stream=None)
