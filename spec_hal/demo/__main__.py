"""``python -m spec_hal.demo [options]``: the same as ``spec-hal demo``."""

import argparse
import sys

from . import add_arguments, main

parser = argparse.ArgumentParser(prog="python -m spec_hal.demo", description=__doc__)
add_arguments(parser)
sys.exit(main(parser.parse_args()))
