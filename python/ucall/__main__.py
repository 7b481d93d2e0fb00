# SPDX-License-Identifier: Apache-2.0
"""`python -m ucall`: the `ucall` command."""

from ucall.cli import main

main()
