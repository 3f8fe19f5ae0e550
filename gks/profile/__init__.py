# SPDX-License-Identifier: Apache-2.0
"""The harness: timing, benchmarking, autotuning and roofline helpers."""
