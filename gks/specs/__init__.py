# SPDX-License-Identifier: Apache-2.0
"""One module per kernel family, each registering its ops' OpSpecs (see gks.registry)."""
