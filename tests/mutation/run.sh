#!/usr/bin/env bash
# Mutation testing of the pure decision code with the unit tests (no broker), then the score per
# file. Usage, from the repository root:
#   tests/mutation/run.sh [FILE.py ...]      (default: the files listed in DEFAULT_FILES)
# Settings are in pyproject's [tool.mutmut]. Results accumulate in mutants/ (git-ignored): a
# mutant already tested is not re-run unless its file is named here; `rm -rf mutants` starts over.
# MUTMUT_CHILDREN (default 1) sets the parallel test processes.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEFAULT_FILES=(
  streams/engine/decide.py
  streams/engine/evidence.py
  streams/engine/progress.py
  streams/policy.py
  consumers/jobstatus/logic.py
  consumers/quarantine/logic.py
  consumers/requeue/logic.py
)
files=("$@")
[ ${#files[@]} -eq 0 ] && files=("${DEFAULT_FILES[@]}")

python="${PYTHON:-$(command -v python)}"
mutmut="$(dirname "$python")/mutmut"
patterns=()
for f in "${files[@]}"; do
  module="${f%.py}"
  patterns+=("${module//\//.}.*")
done

# mutmut must import the mutated copy under mutants/, never this tree: no PYTHONPATH.
env -u PYTHONPATH "$mutmut" run --max-children "${MUTMUT_CHILDREN:-1}" "${patterns[@]}" \
  > mutants/last-run.log 2>&1 || { tail -50 mutants/last-run.log; exit 1; }
env -u PYTHONPATH "$mutmut" results --all true 2>/dev/null \
  | "$python" tests/mutation/score.py "${files[@]}"
