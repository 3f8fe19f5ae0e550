# SPDX-License-Identifier: Apache-2.0
"""One module per op, each registering its OpSpec (see gks.registry)."""
