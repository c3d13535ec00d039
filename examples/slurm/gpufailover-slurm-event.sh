#!/usr/bin/env bash
# Publish Slurm job lifecycle events to gpufailover's jobs.events topic.
#
# Install on the slurmctld host and point slurm.conf at it, as any of:
#   PrologSlurmctld=/etc/slurm/gpufailover-slurm-event.sh   -> "started"
#   EpilogSlurmctld=/etc/slurm/gpufailover-slurm-event.sh   -> "terminated" / "succeeded" / "cancelled"
#   JobCompType=jobcomp/script
#   JobCompLoc=/etc/slurm/gpufailover-slurm-event.sh        -> the same as EpilogSlurmctld
# (use the epilog or jobcomp, not both: each would publish the end of the job).
#
# slurmctld runs it with a bare environment, so settings come from a file (default
# /etc/gpufailover/slurm.env, or $GPUFAILOVER_SLURM_ENV), e.g.:
#   GPUFAILOVER_BIN=/opt/gpufailover/bin/gpufailover
#   GPUFAILOVER_BOOTSTRAP=kafka-1.example.org:9092,kafka-2.example.org:9092
#   GPUFAILOVER_TOPIC_PREFIX=
#
# What it sends:
#   job id     SLURM_JOB_ID (epilog/prolog) or JOBID (jobcomp)
#   nodes      SLURM_JOB_NODELIST or NODES, a Slurm hostlist (gpu-[01-04]) expanded by the CLI
#   attempt    the requeue count: SLURM_RESTART_COUNT if set, else Restarts= from scontrol, else 0
#   exit code  from SLURM_JOB_EXIT_CODE2 / EXITCODE ("exit:signal"); a signal N becomes 128+N
#   reason     from the job state and signal: OUT_OF_MEMORY -> OOMKilled, NODE_FAIL -> WorkerLost,
#              TIMEOUT -> TimeLimit, PREEMPTED -> Preempted, signal N -> Signal:<NAME>
#
# It never fails the job: a publish error is logged (syslog tag gpufailover) and it exits 0.
set -u

conf="${GPUFAILOVER_SLURM_ENV:-/etc/gpufailover/slurm.env}"
if [ -r "$conf" ]; then
    set -a
    # shellcheck disable=SC1090
    . "$conf"
    set +a
fi
export PATH="${PATH:-/usr/bin:/bin}:/usr/local/bin:/usr/bin:/bin"
bin="${GPUFAILOVER_BIN:-gpufailover}"

log() {
    if command -v logger >/dev/null 2>&1; then
        logger -t gpufailover -- "$*"
    fi
    echo "gpufailover-slurm-event: $*" >&2
}

job_id="${SLURM_JOB_ID:-${JOBID:-}}"
if [ -z "$job_id" ]; then
    log "no SLURM_JOB_ID or JOBID in the environment: not run by slurmctld?"
    exit 0
fi
nodes="${SLURM_JOB_NODELIST:-${NODES:-}}"
case "$nodes" in "(null)" | "None assigned") nodes="" ;; esac
exit2="${SLURM_JOB_EXIT_CODE2:-${EXITCODE:-0:0}}"
state="${JOBSTATE:-}"

# The job record, while slurmctld still holds it: state, reason and requeue count.
job_info=""
if command -v scontrol >/dev/null 2>&1; then
    job_info="$(scontrol show job -o "$job_id" 2>/dev/null || true)"
fi
field() { # field NAME -> the value of NAME=... in the one-line scontrol output
    printf '%s\n' "$job_info" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1
}
if [ -z "$state" ]; then
    state="$(field JobState)"
fi
slurm_reason="$(field Reason)"
attempt="${SLURM_RESTART_COUNT:-$(field Restarts)}"
attempt="${attempt:-0}"

publish() {
    if ! "$bin" publish "$@" --job-id "$job_id" --attempt "$attempt" --timeout 10; then
        log "could not publish $1 for job $job_id (attempt $attempt)"
    fi
    exit 0
}

nodes_args=()
if [ -n "$nodes" ]; then
    nodes_args=(--nodes "$nodes")
fi

if [ "${SLURM_SCRIPT_CONTEXT:-}" = "prolog_slurmctld" ]; then
    publish started ${nodes_args[@]+"${nodes_args[@]}"}
fi

code="${exit2%%:*}"
sig="${exit2##*:}"
case "$code" in '' | *[!0-9]*) code=0 ;; esac
case "$sig" in '' | *[!0-9]*) sig=0 ;; esac
exit_code="$code"
if [ "$sig" -ne 0 ]; then
    exit_code=$((128 + sig))
fi

case "$state" in
    CANCELLED*) publish cancelled ${nodes_args[@]+"${nodes_args[@]}"} --exit-code "$exit_code" ;;
    COMPLETED*)
        if [ "$exit_code" -eq 0 ]; then
            publish succeeded ${nodes_args[@]+"${nodes_args[@]}"} --exit-code 0
        fi
        ;;
    "")
        if [ "$exit_code" -eq 0 ]; then
            publish succeeded ${nodes_args[@]+"${nodes_args[@]}"} --exit-code 0
        fi
        ;;
esac

reason=""
case "$state" in
    OUT_OF_MEMORY*) reason=OOMKilled ;;
    NODE_FAIL*) reason=WorkerLost ;;
    TIMEOUT*) reason=TimeLimit ;;
    PREEMPTED*) reason=Preempted ;;
    BOOT_FAIL*) reason=BootFail ;;
esac
if [ -z "$reason" ] && [ "$slurm_reason" = "OutOfMemory" ]; then
    reason=OOMKilled
fi
if [ -z "$reason" ]; then
    killed_by="$sig"
    if [ "$killed_by" -eq 0 ] && [ "$code" -gt 128 ] && [ "$code" -lt 160 ]; then
        killed_by=$((code - 128)) # a wrapper shell reports its child's signal as 128+N
    fi
    if [ "$killed_by" -ne 0 ]; then
        reason="Signal:$(kill -l "$killed_by" 2>/dev/null || echo "$killed_by")"
    fi
fi

if [ -z "$nodes" ]; then
    log "job $job_id ended ($state, exit $exit2) without nodes: nothing to publish"
    exit 0
fi
reason_args=()
if [ -n "$reason" ]; then
    reason_args=(--reason "$reason")
fi
publish terminated ${nodes_args[@]+"${nodes_args[@]}"} --exit-code "$exit_code" ${reason_args[@]+"${reason_args[@]}"}
