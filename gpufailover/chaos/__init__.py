"""`gpufailover chaos`: a seeded workload through a multi-worker pipeline while services are
killed, workers come and go and the broker restarts; the outputs are then checked against
`gpufailover replay` of the same input (see docs/chaos.md)."""
