# SPDX-License-Identifier: Apache-2.0
"""How outputs are compared with the reference (re-exported for the test files)."""

from gks.testing import assert_matches, check_output

__all__ = ["assert_matches", "check_output"]
