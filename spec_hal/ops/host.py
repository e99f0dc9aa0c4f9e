"""Family H: host utilities ."""

from __future__ import annotations

import os
import pickle
import socket
import urllib.parse
import urllib.request
from pathlib import Path

import torch
from torch import Tensor

from .. import config
from ..runtime import record_stream_each
from ..validation import check_positive_int

__all__ = ["load_token_map", "record_stream_each"]


class TokenMapNotFoundError(FileNotFoundError, ValueError):
    """The token map is neither a local file nor available from the hub (a ValueError too, as every
    non-dtype argument error of the op contracts)."""


#: How long the check that the hub answers at all may wait (huggingface_hub itself retries a
#: failing connection for about 20 s before giving up).
HUB_PROBE_SECONDS = 3.0

#: The integer dtypes a token map may hold (every value fits int64).
_ID_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.uint16, torch.int32, torch.uint32, torch.int64)


def load_token_map(
    path: str | os.PathLike, device: torch.device | str | None = None, vocab_size: int | None = None
) -> Tensor:
    """Load a draft model's token map: the target-vocabulary id of each draft-vocabulary token.

    Draft heads with a reduced vocabulary (EAGLE-3, FR-Spec "hot" token lists) predict ids in their
    own small vocabulary; the engine maps them through this tensor to target ids before verify.

    ``path`` is a local file, or ``org/repo/file/in/repo`` on the Hugging Face Hub (the optional
    extra ``spec-hal[hub]``): the file is taken from the local cache first and downloaded only when
    the machine is online. Offline (``HF_HUB_OFFLINE``, or the hub not reachable within a few
    seconds) the call fails at once, naming both readings of ``path`` it tried. With
    ``SPEC_HAL_USE_MODELSCOPE=1`` the repository is resolved through ModelScope instead. The file is
    read with ``torch.load(weights_only=True)``: a dense tensor or a list of ints, never arbitrary
    pickled objects.

    Args:
        path: local file path, or ``org/repo/file`` on the hub.
        device: where the returned tensor lives (None: the CPU).
        vocab_size: the target vocabulary size; every id must be below it (None: not checked).

    Returns:
        A 1-D int64 tensor of unique, non-negative token ids.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}")
    if vocab_size is not None:
        check_positive_int("vocab_size", vocab_size)
    try:
        target = torch.device("cpu") if device is None else torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device: expected a torch device or its name, got {device!r}") from error
    local = Path(os.fspath(path)).expanduser()
    if local.is_file():
        file = local
    elif local.exists():
        raise ValueError(f"path: {local} is not a file")
    else:
        file = _hub_file(os.fspath(path))
    token_map = _read_token_map(file)
    _check_token_map(file, token_map, vocab_size)
    return _placed(token_map.to(torch.int64), target)


def _placed(token_map: Tensor, device: torch.device) -> Tensor:
    """``token_map`` on ``device``; a device this torch cannot reach is a ValueError naming it."""
    try:
        return token_map.to(device)
    except torch.OutOfMemoryError:
        raise
    except (AssertionError, RuntimeError) as error:  # torch's "not compiled with CUDA" is an assert
        raise ValueError(f"device: cannot place the token map on {device}: {_first_line(error)}") from error


def _split_repo_path(path: str) -> tuple[str, str] | None:
    """``org/repo/dir/file`` -> (``org/repo``, ``dir/file``); None if it cannot name a hub file."""
    if os.path.isabs(path) or "\\" in path:
        return None
    parts = path.split("/")
    if len(parts) < 3 or any(part in ("", ".", "..") for part in parts):
        return None
    return "/".join(parts[:2]), "/".join(parts[2:])


def _hub_file(path: str) -> Path:
    repo = _split_repo_path(path)
    no_local = f"path: no local file {os.path.abspath(os.path.expanduser(path))}"
    if repo is None:
        raise TokenMapNotFoundError(f"{no_local} (and {path!r} is not of the form org/repo/file for the hub)")
    repo_id, filename = repo
    if config.use_modelscope():
        return _modelscope_file(repo_id, filename)
    return _hugging_face_file(repo_id, filename, no_local)


def _hugging_face_file(repo_id: str, filename: str, no_local: str) -> Path:
    """``filename`` of hub repo ``repo_id``: from the local cache, else downloaded when online.
    ``no_local`` says why ``path`` was not read as a local file (every error names both readings)."""
    try:
        # constants are read now, not at import: the caller (or a test) may have changed them since
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.utils import (
            EntryNotFoundError,
            HfHubHTTPError,
            HFValidationError,
            LocalEntryNotFoundError,
        )
    except ImportError as error:
        raise TokenMapNotFoundError(
            f"{no_local}; reading it as file {filename!r} of Hugging Face repo {repo_id!r} needs "
            f'huggingface_hub: pip install "spec-hal[hub]"'
        ) from error

    as_hub_file = f"{no_local}; as Hugging Face repo {repo_id!r}, file {filename!r}"
    cache_dir = constants.HF_HUB_CACHE
    try:
        return Path(hf_hub_download(repo_id, filename, cache_dir=cache_dir, local_files_only=True))
    except (LocalEntryNotFoundError, EntryNotFoundError):
        pass
    except HFValidationError as error:
        raise TokenMapNotFoundError(
            f"{no_local}, and {repo_id!r} is not a Hugging Face repo id ({error})"
        ) from error
    is_offline = getattr(constants, "is_offline_mode", None)
    offline = "HF_HUB_OFFLINE is set" if (is_offline() if is_offline else constants.HF_HUB_OFFLINE) else None
    offline = offline or _unreachable(constants.ENDPOINT)
    if offline is not None:
        raise TokenMapNotFoundError(
            f"{as_hub_file}, it is not in the local cache ({cache_dir}) and this machine is offline "
            f"({offline}). Make it available with `hf download {repo_id} {filename}` on a machine with "
            "network access (then copy the cache or set HF_HUB_CACHE to it), or pass a local file path."
        ) from None
    try:
        return Path(hf_hub_download(repo_id, filename, cache_dir=cache_dir))
    except (EntryNotFoundError, HfHubHTTPError, OSError) as error:
        raise TokenMapNotFoundError(
            f"{as_hub_file}, could not get it: {error}. Check the repo id, the file name and access "
            "(HF_TOKEN for gated repos), or pass a local file path."
        ) from error


def _unreachable(endpoint: str) -> str | None:
    """Why the hub at ``endpoint`` (or the proxy in front of it) cannot be reached, found within
    :data:`HUB_PROBE_SECONDS`; None when it answers (or when this cannot tell)."""
    url = urllib.parse.urlsplit(endpoint)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    if host is None:
        return None
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if proxy_url.hostname is None:
            return None
        host, port = proxy_url.hostname, proxy_url.port or 80
    try:
        with socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS):
            return None
    except OSError as error:  # DNS failure, refused, unreachable, timed out
        return f"cannot connect to {host}:{port}: {error}"


def _modelscope_file(repo_id: str, filename: str) -> Path:
    try:
        from modelscope.hub.file_download import model_file_download
    except ImportError as error:
        raise ImportError(
            f"{config.ENV_USE_MODELSCOPE}=1 needs the modelscope package (pip install modelscope), "
            "or unset it to use the Hugging Face Hub"
        ) from error
    try:
        return Path(model_file_download(model_id=repo_id, file_path=filename))
    except Exception as error:  # modelscope has no stable exception hierarchy
        raise TokenMapNotFoundError(
            f"path: could not get {filename!r} from ModelScope repo {repo_id!r}: {error}"
        ) from error


def _read_token_map(file: Path) -> Tensor:
    try:
        content = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "unsupported global" in str(error).lower():
            raise ValueError(
                f"path: {file} is not plain tensor data: it pickles objects that torch.load(weights_only=True) "
                "refuses to build; save the token map as a tensor or a list of ints with torch.save"
            ) from error
        raise ValueError(f"path: {file} is not a readable torch.save file ({_first_line(error)})") from error
    except Exception as error:  # truncated zip, random bytes, empty file: torch raises many types
        raise ValueError(f"path: {file} is not a readable torch.save file ({_first_line(error)})") from error
    if isinstance(content, Tensor):
        if content.layout != torch.strided:
            raise ValueError(
                f"path: {file} holds a {content.layout} tensor; expected a dense 1-D integer tensor"
            )
        if content.is_meta:
            raise ValueError(f"path: {file} holds a meta tensor (shape only, no data); expected token ids")
        return content
    if isinstance(content, (list, tuple)) and all(type(item) is int for item in content):
        return torch.tensor(content, dtype=torch.int64)
    raise ValueError(
        f"path: {file} holds {type(content).__name__}; expected a 1-D integer tensor or a list of ints"
    )


def _first_line(error: BaseException) -> str:
    """The informative line of a load error (torch's weights-only errors start with boilerplate)."""
    text = str(error)
    text = text.split("WeightsUnpickler error:", 1)[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else 'no message'}"


def _check_token_map(file: Path, token_map: Tensor, vocab_size: int | None) -> None:
    dtype = token_map.dtype
    if dtype not in _ID_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in _ID_DTYPES)
        raise ValueError(f"path: {file} holds a {dtype} tensor; expected integer token ids ({names})")
    if token_map.dim() != 1:
        raise ValueError(f"path: {file} holds a tensor of shape {tuple(token_map.shape)}; expected 1-D")
    if token_map.numel() == 0:
        raise ValueError(f"path: {file} holds no token ids")
    ids = token_map.long()
    if bool((ids < 0).any()):
        raise ValueError(f"path: {file}: token ids must be non-negative; found {int(ids.min())}")
    if vocab_size is not None and bool((ids >= vocab_size).any()):
        raise ValueError(
            f"path: {file}: token ids must be < vocab_size = {vocab_size}; found {int(ids.max())}"
        )
    ordered = ids.sort().values
    repeated = ordered[1:] == ordered[:-1]
    if bool(repeated.any()):
        raise ValueError(f"path: {file}: token ids must be unique; {int(ordered[1:][repeated][0])} repeats")
