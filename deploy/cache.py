"""Where downloads and builds kept across runs live (Kafka jars, Kubernetes binaries).

One folder for every `GPUFAILOVER_STATE_DIR`: state is per broker or test, downloads are not
(each test run or demo would otherwise fetch the ~46 MB of Kafka jars again).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "GPUFAILOVER_CACHE_DIR"


def cache_root() -> Path:
    """`$GPUFAILOVER_CACHE_DIR`, else `~/.cache/gpufailover`."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return Path.home() / ".cache" / "gpufailover"
