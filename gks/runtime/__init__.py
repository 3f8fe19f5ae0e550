# SPDX-License-Identifier: Apache-2.0
"""What the ops use at call time and nothing more: the tuned-config lookup
(:mod:`gks.runtime.tables`), the argument dims that size outputs and key it
(:mod:`gks.runtime.dims`) and the number checks the ports share with the C++ bindings
(:mod:`gks.runtime.args`). It never imports the harness (gks.profile)."""
