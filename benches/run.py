#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the UCall benchmarks and writes benches/results/: `python -m ucallbench` under its
old name (benches/ucallbench/ is the driver; benches/README.md the method).

    python3 benches/run.py [--quick] [--servers a,b] [--workloads x,y] [--reps N]
"""

import sys

from ucallbench.cli import main  # benches/ is this script's directory, so on sys.path

if __name__ == "__main__":
    sys.exit(main())
