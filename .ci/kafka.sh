#!/usr/bin/env bash
# Run a command against a local Kafka broker: `bash .ci/kafka.sh pytest -m integration`.
# Starts one with `gpufailover broker start` unless KAFKA_BOOTSTRAP is already set, exports
# KAFKA_BOOTSTRAP for the command, and stops the broker afterwards (also on failure).
set -euo pipefail
gpufailover="${GPUFAILOVER:-gpufailover}"
if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
  own_state=""
  if [ -z "${GPUFAILOVER_STATE_DIR:-}" ]; then
    own_state="$(mktemp -d)"
    export GPUFAILOVER_STATE_DIR="$own_state"
  fi
  cleanup() {
    env -u KAFKA_BOOTSTRAP "$gpufailover" broker stop --delete-data || true
    if [ -n "$own_state" ]; then rm -rf "$own_state"; fi
  }
  trap cleanup EXIT
  KAFKA_BOOTSTRAP="$("$gpufailover" broker start --fresh)"
fi
export KAFKA_BOOTSTRAP
"$@"
