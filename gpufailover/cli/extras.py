"""Optional extras: which commands need `gpufailover[pipeline]`, and the one-line hint when absent.

`pip install gpufailover` is the light node install (agent, `publish`, telemetry client); the
classifier (faust) and the Kubernetes parts (lightkube) come with the `pipeline` extra. A command
that needs one of those modules on a light install ends with `hint_for(exc)` instead of a traceback.
"""

from __future__ import annotations

import importlib.util

# Exit status of a command whose extra is not installed (sysexits' EX_UNAVAILABLE).
EXIT_MISSING_EXTRA = 69

# Top-level modules that only the `pipeline` extra installs (faust-streaming brings `mode`).
PIPELINE_MODULES: frozenset[str] = frozenset({"faust", "mode", "lightkube", "httpx2"})


def hint_for(exc: ModuleNotFoundError) -> str | None:
    """What to install for `exc`, or None when the missing module is not from an extra."""
    top = (exc.name or "").partition(".")[0]
    if top not in PIPELINE_MODULES:
        return None
    return (
        f"this command needs the pipeline extra (module {top!r} is missing): "
        "pip install 'gpufailover[pipeline]'"
    )


def require_pipeline() -> None:
    """Raise ModuleNotFoundError (for `hint_for`) before a command starts work it cannot finish."""
    for name in sorted(PIPELINE_MODULES):
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
