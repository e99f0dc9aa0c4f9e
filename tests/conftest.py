"""Test-tree setup: the oracles package (loop-based references, never shipped) is importable."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
