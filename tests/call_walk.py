"""Which of spec_hal's files a call passes: a ``sys.setprofile`` walk (imported by the walk tests as
``call_walk``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import spec_hal

_PACKAGE = os.path.dirname(spec_hal.__file__) + os.sep


def _ours(frame: Any) -> bool:
    name = frame.f_code.co_filename
    return name.startswith(_PACKAGE) or name.startswith("<spec_hal")


def walk(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
    """(file under ``spec_hal/``, function) of each Python frame of spec_hal that ``fn(*args,
    **kwargs)`` enters through spec_hal's frames alone, in order: what torch or Triton run from
    their own frames (a kernel's body under the interpreter) is theirs. Code spec_hal generates (a
    launch's reader) counts under its ``<spec_hal ...>`` name, as no file."""
    root = sys._getframe()
    stops: list[tuple[str, str]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not _ours(frame):
            return
        caller = frame.f_back
        while caller is not None and caller is not root:
            if not _ours(caller):
                return
            caller = caller.f_back
        name = frame.f_code.co_filename
        stops.append((name[len(_PACKAGE) :] if name.startswith(_PACKAGE) else name, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return stops


def files(stops: list[tuple[str, str]]) -> list[str]:
    """The files of ``stops``, each once, in the order first entered (generated code left out)."""
    return list(dict.fromkeys(file for file, _ in stops if not file.startswith("<")))


def entered(stops: list[tuple[str, str]], file: str) -> list[str]:
    """The functions of ``file`` that ``stops`` enter, in order."""
    return [function for where, function in stops if where == file]
