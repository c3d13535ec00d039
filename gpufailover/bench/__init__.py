"""The pipeline benchmarks (`gpufailover bench`); the harness is `gpufailover.bench.pipeline`.

This module stays light: the CLI imports it for `--help`."""

SCENARIOS = ("throughput", "latency", "flood", "memory", "scaleout", "replay")  # run in this order
