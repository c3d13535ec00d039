"""The quarantine service: keeps `nodes.quarantine` (compacted, key node) current.

Public API: `run_quarantine(settings, stop)` (in `consumers.quarantine.app`) and
`QuarantineSettings` (in `consumers.quarantine.config`); commands in `gpufailover.cli.quarantine`.
"""
