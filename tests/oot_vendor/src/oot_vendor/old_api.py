"""A plugin written for another spec_hal API version: it must be reported, never loaded."""

SPEC_HAL_API_VERSION = 0


def register() -> None:  # pragma: no cover - must never run
    raise AssertionError("a plugin of another API version was loaded")
