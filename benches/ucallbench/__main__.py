# SPDX-License-Identifier: Apache-2.0
"""`python -m ucallbench`: see ucallbench/__init__.py."""

import sys

from ucallbench.cli import main

sys.exit(main())
