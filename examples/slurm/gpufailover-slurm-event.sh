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
#   GPUFAILOVER_SLURM_LOG=/var/log/gpufailover-slurm.log   # the detached epilog's output
#   GPUFAILOVER_SLURM_SPOT_PARTITIONS=spot                  # -> --spot (never failed over)
#   GPUFAILOVER_SLURM_SPOT_QOS=preemptible
#   GPUFAILOVER_SLURM_NO_FAILOVER_QOS=nofailover            # -> --no-failover
#
# What it sends:
#   job id     SLURM_JOB_ID (epilog/prolog) or JOBID (jobcomp)
#   nodes      SLURM_JOB_NODELIST or NODES, a Slurm hostlist (gpu-[01-04]) expanded by the CLI
#   attempt    the requeue count: SLURM_JOB_RESTART_COUNT (slurmctld hooks), SLURM_RESTART_COUNT,
#              else Restarts= from scontrol, else 0
#   state      EpilogSlurmctld runs while the job is COMPLETING: the script detaches and waits
#              (up to GPUFAILOVER_SLURM_FINAL_WAIT_S, 120) for the final JobState, which alone
#              tells completed, cancelled, timed-out and node-failed jobs apart
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
read_job() {
    if command -v scontrol >/dev/null 2>&1; then
        job_info="$(scontrol show job -o "$job_id" 2>/dev/null || true)"
    fi
}
field() { # field NAME -> the value of NAME=... in the one-line scontrol output
    printf '%s\n' "$job_info" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1
}
read_job

# Inside EpilogSlurmctld the job is still COMPLETING, and its environment says exit 0 for a
# completed, cancelled, timed-out, node-failed or requeued job alike. Its final state appears
# only once this epilog has returned: so return now, and read it from a detached copy.
if [ "${SLURM_SCRIPT_CONTEXT:-}" = "epilog_slurmctld" ] && [ -z "$state" ] \
    && [ "$(field JobState)" = "COMPLETING" ]; then
    if [ -z "${GPUFAILOVER_SLURM_FINAL:-}" ]; then
        GPUFAILOVER_SLURM_FINAL=1 setsid bash "${BASH_SOURCE[0]}" </dev/null \
            >>"${GPUFAILOVER_SLURM_LOG:-/dev/null}" 2>&1 &
        exit 0
    fi
    waited=0
    while [ "$(field JobState)" = "COMPLETING" ] && [ "$waited" -lt "${GPUFAILOVER_SLURM_FINAL_WAIT_S:-120}" ]; do
        sleep 1
        waited=$((waited + 1))
        read_job
    done
fi
if [ -z "$state" ]; then
    state="$(field JobState)"
fi
slurm_reason="$(field Reason)"
restarts_now="$(field Restarts)"
# The attempt that ended: slurmctld's hooks get SLURM_JOB_RESTART_COUNT (the job's own
# environment has SLURM_RESTART_COUNT); Restarts= from scontrol only as a last resort.
attempt="${SLURM_JOB_RESTART_COUNT:-${SLURM_RESTART_COUNT:-$restarts_now}}"
attempt="${attempt:-0}"

# Per-job opt-out and spot jobs, by partition or QOS (comma lists in the settings file).
in_list() { # in_list VALUE LIST
    case ",$2," in *",$1,"*) [ -n "$1" ] ;; *) return 1 ;; esac
}
policy_args=()
partition="${SLURM_JOB_PARTITION:-${PARTITION:-$(field Partition)}}"
qos="$(field QOS)"
if in_list "$partition" "${GPUFAILOVER_SLURM_SPOT_PARTITIONS:-}" \
    || in_list "$qos" "${GPUFAILOVER_SLURM_SPOT_QOS:-}"; then
    policy_args+=(--spot)
fi
if in_list "$qos" "${GPUFAILOVER_SLURM_NO_FAILOVER_QOS:-}"; then
    policy_args+=(--no-failover)
fi

publish() {
    if ! "$bin" publish "$@" --job-id "$job_id" --attempt "$attempt" --timeout 10 \
        ${policy_args[@]+"${policy_args[@]}"}; then
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

if [ "${SLURM_SCRIPT_CONTEXT:-}" = "epilog_slurmctld" ] && [ -n "$restarts_now" ] \
    && [ -n "${SLURM_JOB_RESTART_COUNT:-}" ]; then
    if [ "$restarts_now" -gt "$SLURM_JOB_RESTART_COUNT" ]; then
        # Slurm requeued the job itself (a node failed under a --requeue job): the hooks
        # still see the old count, Restarts= the new one. The attempt was lost to a node.
        state=NODE_FAIL
    elif [ "$state" = "PENDING" ] || [ "$slurm_reason" = "job_requeued_in_held_state" ]; then
        # `scontrol requeue[hold]` (gpufailover's requeue or an operator): not a failure.
        log "job $job_id requeued by scontrol (restart $restarts_now): nothing to publish"
        exit 0
    fi
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
case "$reason:$slurm_reason" in
    :OutOfMemory) reason=OOMKilled ;;
    :NodeDown | :NodeFail) reason=WorkerLost ;;
    :TimeLimit) reason=TimeLimit ;;
esac
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
