"""Deliberately simple loop-based oracles, one module per op family (test tree only)."""
