# SPDX-License-Identifier: Apache-2.0
"""What the ops use at call time and nothing more: the tuned-config lookup
(:mod:`gks.runtime.tables`) and the argument dims that size outputs and key it
(:mod:`gks.runtime.dims`). It never imports the harness (gks.profile)."""
