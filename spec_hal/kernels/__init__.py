"""Kernel families shared by several vendors (one copy each; vendors choose launch configurations)."""
