"""A real Slurm cluster on this host, for the integration tests and `gpufailover demo --scheduler
slurm`.

munged, slurmctld and N slurmd (`gpu-1` ... `gpu-N`, default 4, 8 GPUs each: symlinks to
/dev/null) run under one temp dir on free ports; nothing outside it is written (docs/slurm.md,
"Testing"). Every slurmd is a process of this host with a port of its own, so N is bounded by
the host (a few dozen at most; the demo caps it at MAX_NODES). Clients
find it only through `SLURM_CONF`, which `SlurmCluster.env` carries. The slurmctld hooks call
`hook.sh` under the temp dir, which sources `hook.env` (written by a test: which broker and
topics to publish to) and then runs the script a test installed as `hook_script`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from deploy.local_wait import poll_until
from gpufailover.ports import free_ports
from gpufailover.slurm_text import parse_fields

REPO = Path(__file__).resolve().parents[1]
MAX_NODES = 16


def node_names(count: int) -> tuple[str, ...]:
    return tuple(f"gpu-{i}" for i in range(1, count + 1))


NODES = node_names(4)
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sbatch", "sinfo", "squeue")
READY_TIMEOUT_S = 30.0
HOOKS_WAIT_S = 20.0  # an epilog's copy publishes within seconds of its job's end


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S) -> None:
    poll_until(what, check, timeout_s, poll_s=0.1)


@dataclass
class SlurmCluster:
    base: Path
    processes: dict[str, subprocess.Popen[bytes]]
    nodes: tuple[str, ...] = NODES

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def hook_env(self) -> Path:
        return self.base / "hook.env"

    @property
    def hook_log(self) -> Path:
        return self.base / "log" / "hook.log"

    def install_hooks(self, bootstrap: str, prefix: str) -> None:
        """Have slurmctld's prolog/epilog run examples/slurm/gpufailover-slurm-event.sh,
        publishing to this broker and topic prefix through this checkout's `gpufailover`."""
        gpufailover = self.base / "gpufailover"
        gpufailover.write_text(f'#!/bin/sh\nexec {sys.executable} -m gpufailover "$@"\n')
        gpufailover.chmod(0o755)
        settings = {
            "HOOK_SCRIPT": str(REPO / "examples" / "slurm" / "gpufailover-slurm-event.sh"),
            "GPUFAILOVER_SLURM_ENV": "/dev/null",
            "GPUFAILOVER_BIN": str(gpufailover),
            "GPUFAILOVER_BOOTSTRAP": bootstrap,
            "GPUFAILOVER_TOPIC_PREFIX": prefix,
            "GPUFAILOVER_SLURM_LOG": str(self.hook_log),
            "GPUFAILOVER_SLURM_SPOT_PARTITIONS": "spot",
            "PYTHONPATH": str(REPO),
        }
        self.hook_env.write_text("".join(f"export {k}='{v}'\n" for k, v in settings.items()))

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, *args: str) -> str:
        """Submit a batch job; its JobId."""
        return self.run("sbatch", "--parsable", "-o", "/dev/null", *args).strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol -o show job` as a dict ({} once slurmctld forgot the job)."""
        out = self.run("scontrol", "-o", "show", "job", job_id, check=False)
        return parse_fields(out)

    def node(self, name: str) -> dict[str, str]:
        return parse_fields(self.run("scontrol", "-o", "show", "node", name))

    def node_state(self, name: str) -> str:
        return self.node(name).get("State", "")

    def wait_job(
        self, job_id: str, what: str, check: Callable[[dict[str, str]], bool]
    ) -> dict[str, str]:
        """The job's fields as first seen passing `check` (a later query may see it moved on)."""
        seen: list[dict[str, str]] = []

        def passes() -> bool:
            seen[:] = [self.job(job_id)]
            return check(seen[-1])

        wait_for(f"job {job_id} {what}", passes)
        return seen[-1]

    def reset(self) -> None:
        """Between tests: no jobs, every node idle with no drain."""
        self.run("scancel", "--full", "--user", "root", check=False)
        wait_for("no jobs", lambda: not self.run("squeue", "-h").strip())
        for n in self.nodes:
            if self.node_state(n) != "IDLE":
                self.run("scontrol", "update", f"NodeName={n}", "State=RESUME", check=False)
        wait_for(
            "all nodes idle", lambda: all(self.node_state(n) == "IDLE" for n in self.nodes), 60.0
        )


def _write_config(base: Path, nodes: tuple[str, ...]) -> None:
    ctld, *ports = free_ports(len(nodes) + 1)
    for d in ("etc", "state", "log", "run", "dev", "munge", *(f"spool/{n}" for n in nodes)):
        (base / d).mkdir(parents=True, exist_ok=True)
    hosts = f"gpu-[1-{len(nodes)}]"
    (base / "munge").chmod(0o711)  # munged: its socket dir must be o+x
    for i in range(8):
        (base / "dev" / f"nvidia{i}").symlink_to("/dev/null")  # fake GPUs: char devices
    (base / "etc" / "slurm.conf").write_text(
        f"""ClusterName=gpufailover-test
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge/munge.socket,cred_expire=5
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool/%n
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd-%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=1
SlurmdTimeout=10
GresTypes=gpu
PrologSlurmctld={base}/hook.sh
EpilogSlurmctld={base}/hook.sh
NodeName={hosts} NodeHostname=localhost NodeAddr=127.0.0.1 Port={",".join(map(str, ports))} \
CPUs=2 RealMemory=1000 Gres=gpu:8 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    )
    (base / "etc" / "gres.conf").write_text(
        f"AutoDetect=off\nNodeName={hosts} Name=gpu File={base}/dev/nvidia[0-7]\n"
    )
    # slurmctld gives its hooks neither SLURM_CONF nor our settings: the wrapper adds both.
    hook = base / "hook.sh"
    hook.write_text(
        f"""#!/bin/sh
export SLURM_CONF={base}/etc/slurm.conf
[ -r {base}/hook.env ] || exit 0
. {base}/hook.env
exec bash "$HOOK_SCRIPT" >> {base}/log/hook.log 2>&1
"""
    )
    hook.chmod(0o755)


def _spawn(base: Path, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    with (base / "log" / f"{name}.out").open("wb") as out:  # the child keeps its own copy
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=base)


@contextlib.contextmanager
def running_slurm_cluster(node_count: int = len(NODES)) -> Iterator[SlurmCluster]:
    """Start the cluster, yield it once every node is idle, stop it and remove its dir."""
    if not 1 <= node_count <= MAX_NODES:
        raise ValueError(f"a local Slurm cluster has 1 to {MAX_NODES} nodes, not {node_count}")
    base = Path(tempfile.mkdtemp(prefix="gpufailover-slurm-"))
    base.chmod(0o755)
    nodes = node_names(node_count)
    cluster = SlurmCluster(base, {}, nodes)
    try:
        _write_config(base, nodes)
        env = cluster.env
        key = base / "munge" / "munge.key"
        subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
        m = base / "munge"
        cluster.processes["munged"] = _spawn(
            base,
            "munged",
            ["munged", "-F", f"--socket={m}/munge.socket", f"--key-file={key}",
             f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed",
             f"--log-file={m}/munged.log"],
            env,
        )  # fmt: skip
        wait_for("munged's socket", (m / "munge.socket").exists)
        cluster.processes["slurmctld"] = _spawn(base, "slurmctld", ["slurmctld", "-D", "-i"], env)
        for n in nodes:
            cluster.processes[n] = _spawn(base, f"slurmd-{n}", ["slurmd", "-D", "-N", n], env)
        wait_for("slurmctld", lambda: "is UP" in cluster.run("scontrol", "ping", check=False))
        wait_for(
            f"{len(nodes)} idle nodes",
            lambda: (
                cluster.run("sinfo", "-h", "-N", "-o", "%T", check=False).split().count("idle")
                == len(nodes)
            ),
        )
        yield cluster
    finally:
        _stop(cluster)
        shutil.rmtree(base, ignore_errors=True)


def _stop(cluster: SlurmCluster) -> None:
    procs = cluster.processes
    if "slurmctld" in procs and procs["slurmctld"].poll() is None:
        cluster.run("scancel", "--full", "--user", "root", check=False)
        with contextlib.suppress(TimeoutError):
            wait_for("no jobs", lambda: not cluster.run("squeue", "-h", check=False).strip(), 10)
        daemons = {p.pid for p in procs.values()}
        with contextlib.suppress(TimeoutError):  # the epilogs' detached copies publishing
            wait_for("the hooks", lambda: not set(_started_by(cluster)) - daemons, HOOKS_WAIT_S)
        cluster.run("scontrol", "shutdown", check=False)
    for name, proc in procs.items():
        if name == "munged":
            continue
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # a slurmd whose slurmctld died ignores SIGTERM
            proc.wait(timeout=10)
    if "munged" in procs:
        procs["munged"].send_signal(signal.SIGTERM)
        procs["munged"].wait(timeout=10)
    for pid in _started_by(cluster):  # a hook or job step still there: ours, by its env
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _started_by(cluster: SlurmCluster) -> list[int]:
    """Live processes of this cluster: slurmctld/slurmd, their hooks and jobs all carry its
    SLURM_CONF in their environment (this process does not: only `cluster.env` has it)."""
    needle = f"SLURM_CONF={cluster.conf}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().split(") ")[-1][:1]
        except OSError:
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(proc.name))
    return found
