#!/usr/bin/env bash
# Check the Prometheus alert rules and scrape config with promtool (Debian package `prometheus`).
#   bash .ci/promtool.sh            # from the repository root (CI runs as root: installs if needed)
# Installs the package when promtool is missing, then runs
#   promtool check rules  deploy/prometheus/alerts.yml
#   promtool check config deploy/prometheus/prometheus.yml   (checks the rule files it loads too)
#   promtool test rules deploy/prometheus/tests/*.yml         (alert rule unit tests)
# The same package's `prometheus` binary serves tests/integration/test_metrics.py's real-server test.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "promtool.sh: promtool/prometheus missing and not root: apt-get install prometheus" >&2
        exit 1
    fi
    echo "promtool.sh: installing Debian's prometheus package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # A policy-rc.d (unless one exists) keeps the package's init script from starting a server.
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod +x "$policy"
    fi
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    if [ -n "$policy" ]; then rm -f "$policy"; fi
fi

promtool --version 2>&1 | head -1
promtool check rules deploy/prometheus/alerts.yml
promtool check config deploy/prometheus/prometheus.yml
promtool test rules deploy/prometheus/tests/*.yml
