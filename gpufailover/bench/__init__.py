"""The pipeline benchmarks (`gpufailover bench`); the harness is `gpufailover.bench.pipeline`.

This module stays light: the CLI imports it for `--help`."""

# run in this order
SCENARIOS = ("throughput", "latency", "flood", "memory", "scaleout", "replay", "realistic")
