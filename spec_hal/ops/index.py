"""Placeholder: filled by its op family."""

__all__: list[str] = []
