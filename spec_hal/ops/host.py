"""Family H: host utilities ."""

from __future__ import annotations

import os
import pickle
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


def load_token_map(
    path: str | os.PathLike, device: torch.device | str | None = None, vocab_size: int | None = None
) -> Tensor:
    """Load a draft model's token map: the target-vocabulary id of each draft-vocabulary token.

    Draft heads with a reduced vocabulary (EAGLE-3, FR-Spec "hot" token lists) predict ids in their
    own small vocabulary; the engine maps them through this tensor to target ids before verify.

    ``path`` is a local file, or ``org/repo/file/in/repo`` on the Hugging Face Hub: the file is
    taken from the local cache first and downloaded only when the hub is not offline
    (``HF_HUB_OFFLINE``). With ``SPEC_HAL_USE_MODELSCOPE=1`` the repository is resolved through
    ModelScope instead. The file is read with ``torch.load(weights_only=True)``: a tensor or a list
    of ints, never arbitrary pickled objects.

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
    return token_map.to(device=target, dtype=torch.int64)


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
    if repo is None:
        raise TokenMapNotFoundError(f"path: no such file {path!r} (and it is not of the form org/repo/file)")
    repo_id, filename = repo
    if config.use_modelscope():
        return _modelscope_file(repo_id, filename)
    return _hugging_face_file(repo_id, filename)


def _hugging_face_file(repo_id: str, filename: str) -> Path:
    # constants are read now, not at import: the caller (or a test) may have changed them since
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.utils import (
        EntryNotFoundError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
    )

    cache_dir = constants.HF_HUB_CACHE
    try:
        return Path(hf_hub_download(repo_id, filename, cache_dir=cache_dir, local_files_only=True))
    except (LocalEntryNotFoundError, EntryNotFoundError):
        pass
    except HFValidationError as error:
        raise TokenMapNotFoundError(
            f"path: no local file {repo_id}/{filename}, and {repo_id!r} is not a Hugging Face repo id ({error})"
        ) from error
    is_offline = getattr(constants, "is_offline_mode", None)
    if is_offline() if is_offline is not None else constants.HF_HUB_OFFLINE:
        raise TokenMapNotFoundError(
            f"path: no local file {repo_id}/{filename}, and {filename!r} of Hugging Face repo {repo_id!r} "
            f"is not in the local cache ({cache_dir}) while HF_HUB_OFFLINE is set. Make it available with `hf download {repo_id} {filename}` on a "
            "machine with network access (then copy the cache or set HF_HUB_CACHE to it), or pass a "
            "local file path."
        ) from None
    try:
        return Path(hf_hub_download(repo_id, filename, cache_dir=cache_dir))
    except (EntryNotFoundError, HfHubHTTPError, OSError) as error:
        raise TokenMapNotFoundError(
            f"path: no local file {repo_id}/{filename}, and could not get {filename!r} from Hugging Face "
            f"repo {repo_id!r}: {error}. Check the repo "
            "id, the file name and access (HF_TOKEN for gated repos), or pass a local file path."
        ) from error


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
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise ValueError(f"path: {file} holds a {dtype} tensor; expected integer token ids")
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
