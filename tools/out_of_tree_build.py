"""PEP 517 build backend: setuptools, run on a copy of the source tree.

setuptools writes ``build/`` and ``<name>.egg-info`` into the directory it builds in; pip and tox
build in the checkout. Every hook but the editable ones therefore runs in a temporary copy of the
tree (what a build reads: no VCS, caches or earlier build output), and only the wheel, sdist or
metadata directory asked for comes back. Editable installs build in place: they must point at the
checkout, not at a copy that is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (hooks that build in place, as they are)
    build_editable,
    get_requires_for_build_editable,
    prepare_metadata_for_build_editable,
)

_NOT_COPIED = shutil.ignore_patterns(
    ".git", ".tox", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".cache"
)


@contextlib.contextmanager
def _in_a_copy() -> Iterator[None]:
    source = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="spec-hal-build-") as scratch:
        copy = os.path.join(scratch, os.path.basename(source) or "source")
        shutil.copytree(source, copy, ignore=_NOT_COPIED, symlinks=True)
        os.chdir(copy)
        try:
            yield
        finally:
            os.chdir(source)


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    with _in_a_copy():
        return list(_setuptools.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_sdist(config_settings: Any = None) -> list[str]:
    with _in_a_copy():
        return list(_setuptools.get_requires_for_build_sdist(config_settings))


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    target = os.path.abspath(metadata_directory)
    with _in_a_copy():
        return str(_setuptools.prepare_metadata_for_build_wheel(target, config_settings))


def build_wheel(
    wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None
) -> str:
    target, metadata = os.path.abspath(wheel_directory), _absolute(metadata_directory)
    with _in_a_copy():
        return str(_setuptools.build_wheel(target, config_settings, metadata))


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    target = os.path.abspath(sdist_directory)
    with _in_a_copy():
        return str(_setuptools.build_sdist(target, config_settings))
