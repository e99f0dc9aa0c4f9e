"""Family H: host utilities (spec ops.md §H)."""

from __future__ import annotations

from ..runtime import record_stream_each

__all__ = ["record_stream_each"]
