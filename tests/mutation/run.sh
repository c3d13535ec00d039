#!/usr/bin/env bash
# Mutation testing of the pure decision code with the unit tests (no broker), then the score per
# file. From the repository root:
#   tests/mutation/run.sh [--fresh] [FILE.py ...]   (default: DEFAULT_FILES below)
# Settings are in pyproject's [tool.mutmut]; results accumulate in mutants/ (git-ignored). A run
# tests the named files' mutants that have no result yet or were not killed last time (tests may
# have changed since); --fresh deletes mutants/ first and tests every mutant again.
# MUTMUT_CHILDREN (default 1) sets the parallel test processes; PYTHON the interpreter whose
# environment has mutmut (default: `python` on PATH).
set -euo pipefail
cd "$(dirname "$0")/../.."

DEFAULT_FILES=(
  streams/engine/decide.py
  streams/engine/evidence.py
  streams/engine/progress.py
  streams/policy.py
  consumers/jobstatus/logic.py
  consumers/quarantine/logic.py
  consumers/quarantine/lifecycle.py
  consumers/requeue/logic.py
)
if [ "${1:-}" = "--fresh" ]; then
  shift
  rm -rf mutants
fi
files=("$@")
[ ${#files[@]} -eq 0 ] && files=("${DEFAULT_FILES[@]}")

python="${PYTHON:-$(command -v python)}"
mutmut="$(dirname "$python")/mutmut"
score() { "$mutmut" results --all true 2>/dev/null | "$python" tests/mutation/score.py "$@"; }
# mutmut must import the mutated copy under mutants/, never this tree: no PYTHONPATH.
unset PYTHONPATH
mkdir -p mutants

if [ ! -f mutants/mutmut-stats.json ]; then
  # First run: generate the mutants (and collect which tests reach which function).
  todo=()
  for f in "${files[@]}"; do
    module="${f%.py}"
    todo+=("${module//\//.}.*")
  done
else
  mapfile -t todo < <(score --pending "${files[@]}")
fi
if [ ${#todo[@]} -gt 0 ]; then
  echo "testing ${#todo[@]} mutant(s) or pattern(s); log: mutants/last-run.log"
  "$mutmut" run --max-children "${MUTMUT_CHILDREN:-1}" "${todo[@]}" > mutants/last-run.log 2>&1 \
    || { tail -50 mutants/last-run.log; exit 1; }
fi
score "${files[@]}"
