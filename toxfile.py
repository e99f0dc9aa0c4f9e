"""tox plugin: ``requires_backend = <vendor>`` skips an env, before installing anything, when that
vendor's hardware is absent. Probes read device nodes and sysfs only: no torch import."""

from __future__ import annotations

import glob
import os
from typing import Any

from tox.plugin import impl
from tox.tox_env.errors import Skip


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


@impl
def tox_on_install(tox_env: Any, arguments: Any, section: str, of_type: str) -> None:
    backend = tox_env.conf["requires_backend"]
    if backend and not BACKEND_PRESENT[backend]():
        raise Skip(f"skipped: no {backend} device")
