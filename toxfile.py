"""tox plugin: ``requires_backend = <vendor>`` skips an env, before installing anything, when that
vendor's hardware is absent. Probes read device nodes and sysfs only: no torch import.

The env is not skipped by tox's ``Skip`` (tox counts a run of skipped envs alone, such as ``tox -e
cuda`` on a CPU machine, as failed): it installs nothing and its one command says it skipped, an
env that passes."""

from __future__ import annotations

import glob
import os
from typing import Any

from tox.config.loader.memory import MemoryLoader
from tox.config.types import Command
from tox.plugin import impl


def _intel_gpu() -> bool:
    for path in glob.glob("/sys/class/drm/renderD*/device/vendor"):
        try:
            with open(path, encoding="ascii") as handle:
                if handle.read().strip() == "0x8086":
                    return True
        except OSError:
            continue
    return False


BACKEND_PRESENT = {
    "cuda": lambda: bool(glob.glob("/dev/nvidia[0-9]*")),
    "hip": lambda: os.path.exists("/dev/kfd"),
    "musa": lambda: bool(glob.glob("/dev/mtgpu*") or glob.glob("/dev/musa*")),
    "npu": lambda: bool(glob.glob("/dev/davinci[0-9]*")),
    "xpu": _intel_gpu,
}


@impl
def tox_add_env_config(env_conf: Any, state: Any) -> None:
    env_conf.add_config(
        keys=["requires_backend"],
        of_type=str,
        default="",
        desc="skip this env unless this vendor's device is present (cuda, hip, musa, npu, xpu)",
    )
    backend = env_conf["requires_backend"]
    if backend and not BACKEND_PRESENT[backend]():
        skipped = f"skipped: no {backend} device"
        env_conf.loaders.insert(
            0,
            MemoryLoader(
                skip_install=True,
                deps=[],
                commands_pre=[],
                commands=[Command(["python", "-c", f"print({skipped!r})"])],
                commands_post=[],
                description=skipped,
            ),
        )
