# SPDX-License-Identifier: Apache-2.0
"""The binary-message vectors of tests/vectors/binary (docs/wire.md)."""

from __future__ import annotations

from check_binary_vectors import check_binary_directory


def test_binary_vector_files_are_well_formed():
    assert check_binary_directory() == []
