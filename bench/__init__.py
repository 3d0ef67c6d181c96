"""Benchmarks: each measures our number and its baseline in the same run (ratios, not seconds)."""
