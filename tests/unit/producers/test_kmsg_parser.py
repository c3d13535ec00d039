"""Kernel-log XID lines in every format the drivers and log tools write."""

from __future__ import annotations

import pytest

from producers.kmsg import (
    UNPARSED,
    GpuDirectory,
    GpuMapping,
    KernelLogSource,
    KernelXid,
    normalize_bdf,
    parse_line,
)
from producers.metrics import AgentMetrics
from schemas.health import GpuHealth
from schemas.xid import GpuXid

UUID = "GPU-5e4c1fb2-2fa8-1e57-4a3b-8e4b1b2d2a11"

# (line, pci, code, pid, process, text)
XID_LINES = [
    (
        "NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus.",
        "0000:01:00.0", 79, 1122, None, "pid=1122, GPU has fallen off the bus.",
    ),
    (  # newer drivers log no pid for 79
        "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
        "0000:01:00.0", 79, None, None, "GPU has fallen off the bus.",
    ),
    (
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
        "(Node Reboot Required)",
        "0000:01:00.0", 154, None, None,
        "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
    ),
    (
        "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
        "Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
        "0000:cb:00.0", 13, None, None,
        "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): "
        "Illegal Instruction Parameter",
    ),
    (
        "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
        "errorString CTX SWITCH TIMEOUT, Info 0x58005",
        "0000:cb:00.0", 109, 1797828, "pt_main_thread",
        "pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, "
        "Info 0x58005",
    ),
    (  # empty pid
        "NVRM: Xid (PCI:0000:3b:00): 43, pid=, name=python3, Ch 00000010",
        "0000:3b:00.0", 43, None, "python3", "pid=, name=python3, Ch 00000010",
    ),
    (  # very old drivers: no "PCI:" and no pid
        "NVRM: Xid (0000:01:00): 13, 0005 00000000 0000a197 000017b8 00000000 00000000",
        "0000:01:00.0", 13, None, None, "0005 00000000 0000a197 000017b8 00000000 00000000",
    ),
    (  # an 8-digit domain and an uppercase bus
        "NVRM: Xid (PCI:00000000:C3:00.0): 48, pid=77, name=train, An uncorrectable double "
        "bit error (DBE) has been detected on GPU in the framebuffer at partition 6",
        "0000:c3:00.0", 48, 77, "train",
        "pid=77, name=train, An uncorrectable double bit error (DBE) has been detected on GPU "
        "in the framebuffer at partition 6",
    ),
]  # fmt: skip

PREFIXES = [
    "",
    "[  966.500231] ",  # dmesg
    "[Fri Aug 30 11:43:09 2024] ",  # dmesg -T
    "Aug 30 11:43:09 gpu-node-17 kernel: ",  # journalctl -k -o short
    "2024-08-30T11:43:09+0000 gpu-node-17 kernel: ",  # journal short-iso
    "4,1873,966500231,-;",  # /dev/kmsg
    "<4>[  966.500231] ",  # syslog with a priority
]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(("line", "pci", "code", "pid", "process", "text"), XID_LINES)
def test_xid_lines_in_every_format(
    prefix: str, line: str, pci: str, code: int, pid: int | None, process: str | None, text: str
) -> None:
    parsed = parse_line(prefix + line)
    assert isinstance(parsed, KernelXid), prefix + line
    assert (parsed.pci_bus_id, parsed.code, parsed.pid, parsed.process, parsed.text) == (
        pci,
        code,
        pid,
        process,
        text,
    )
    assert parsed.switch is None and parsed.gpu_instance is None


def test_mig_lines_carry_the_gpu_and_compute_instance() -> None:
    line = (
        "[ 3120.41] NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 31, pid=4242, name=python, "
        "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
        "0x7f11_44d0e000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
    )
    parsed = parse_line(line)
    assert isinstance(parsed, KernelXid)
    assert (parsed.pci_bus_id, parsed.code, parsed.gpu_instance, parsed.compute_instance) == (
        "0000:3b:00.0",
        31,
        1,
        0,
    )
    assert (parsed.pid, parsed.process) == (4242, "python")


def test_kernel_timestamps_from_kmsg_and_dmesg_prefixes() -> None:
    line = "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."
    kmsg = parse_line("4,1873,966500231,-;" + line)
    dmesg = parse_line("[  966.50] " + line)
    journal = parse_line("Aug 30 11:43:09 host kernel: " + line)
    assert isinstance(kmsg, KernelXid) and kmsg.boot_usec == 966_500_231
    assert isinstance(dmesg, KernelXid) and dmesg.boot_usec == 966_500_000
    assert isinstance(journal, KernelXid) and journal.boot_usec is None


@pytest.mark.parametrize(
    "line",
    [
        f"NVRM: GPU at PCI:0000:01:00: {UUID}",
        f"[    5.217] NVRM: GPU at PCI:0000:01:00: {UUID}",
        f"6,512,5217000,-;NVRM: GPU at PCI:0000:01:00: {UUID}",
        f"Aug 30 11:00:01 gpu-node-17 kernel: NVRM: GPU at PCI:0000:01:00: {UUID}",
    ],
)
def test_the_pci_to_uuid_mapping_line(line: str) -> None:
    assert parse_line(line) == GpuMapping("0000:01:00.0", UUID)


def test_nvswitch_sxid_lines() -> None:
    non_fatal = parse_line(
        "[ 1201.2] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 RX "
        "Short Error Rate"
    )
    fatal = parse_line(
        "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 24007, Fatal, Link 44 sourcetrack timeout "
        "error (First)"
    )
    assert isinstance(non_fatal, KernelXid) and isinstance(fatal, KernelXid)
    assert (non_fatal.switch, non_fatal.code, non_fatal.fatal_sxid) == (
        "nvidia-nvswitch0",
        20009,
        False,
    )
    assert (fatal.switch, fatal.pci_bus_id, fatal.fatal_sxid) == (
        "nvidia-nvswitch3",
        "0000:c6:00.0",
        True,
    )


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: Xid (PCI:0000:01:00): seventy-nine, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:01): 79, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:01:00: 79, truncated",
        "NVRM: Xid",
        "nvidia-nvswitch0: SXid (PCI:zz): 1, Fatal",
    ],
)
def test_xid_lines_we_cannot_read_are_unparsed(line: str) -> None:
    assert parse_line(line) is UNPARSED


@pytest.mark.parametrize(
    "line",
    [
        "",
        "[    0.000000] Linux version 6.8.0-45-generic",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07",
        "NVRM: GPU at PCI:0000:01:00: not-a-uuid",
        "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver",
        "\x00\xff garbage \ufffd",
    ],
)
def test_other_lines_are_ignored(line: str) -> None:
    assert parse_line(line) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0000:01:00", "0000:01:00.0"),
        ("00000000:01:00.0", "0000:01:00.0"),
        ("0000:CB:00.1", "0000:cb:00.1"),
        ("0001:3b:1f", "0001:3b:1f.0"),
    ],
)
def test_pci_addresses_are_normalized(raw: str, expected: str) -> None:
    assert normalize_bdf(raw) == expected


def _source(directory: GpuDirectory | None = None) -> tuple[KernelLogSource, AgentMetrics]:
    metrics = AgentMetrics()
    source = KernelLogSource(
        "file",
        lambda stop: iter(()),
        "node-b",
        directory or GpuDirectory(),
        metrics,
        now_ms=lambda: 1_700_000_000_000,
    )
    return source, metrics


def test_records_use_the_mapping_lines_for_the_uuid() -> None:
    source, _ = _source()
    out: list[GpuXid | GpuHealth] = []
    source.handle_line(f"NVRM: GPU at PCI:0000:01:00: {UUID}", out.append)
    source.handle_line("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", out.append)
    source.handle_line("NVRM: Xid (PCI:0000:02:00): 48, pid=1, name=x, DBE", out.append)
    first, second = out
    assert first == GpuXid(
        node="node-b",
        xid=79,
        ts_ms=1_700_000_000_000,
        gpu_index=None,
        gpu_uuid=UUID,
        pci_bus_id="0000:01:00.0",
        message="GPU has fallen off the bus.",
        source="kmsg",
    )
    assert (second.gpu_uuid, second.pci_bus_id) == (None, "0000:02:00.0")  # unknown GPU


def test_records_use_the_nvml_directory_for_index_and_uuid() -> None:
    directory = GpuDirectory()
    directory.learn("0000:cb:00.0", uuid=UUID, index=5)
    source, _ = _source(directory)
    out: list[GpuXid | GpuHealth] = []
    source.handle_line(
        "NVRM: Xid (PCI:0000:cb:00 GPU-I:02 GPU-CI:01): 31, pid=9, name=p, MMU Fault", out.append
    )
    (rec,) = out
    assert isinstance(rec, GpuXid)
    assert (rec.gpu_index, rec.gpu_uuid) == (5, UUID)
    assert rec.message == "MIG GPU-I:2 GPU-CI:1: pid=9, name=p, MMU Fault"


def test_unparsed_lines_are_counted_and_fatal_sxids_become_nvlink_health() -> None:
    source, metrics = _source()
    out: list[GpuXid | GpuHealth] = []
    source.handle_line("NVRM: Xid (PCI:0000:01:00): ???", out.append)
    source.handle_line("NVRM: Xid garbage", out.append)
    source.handle_line("nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, x", out.append)
    source.handle_line(
        "nvidia-nvswitch1: SXid (PCI:0000:c4:00.0): 24007, Fatal, Link 4", out.append
    )
    assert metrics.registry.get_sample_value("gpufailover_agent_unparsed_lines_total") == 2
    (health,) = out
    assert isinstance(health, GpuHealth)
    assert (health.condition, health.severity, health.pci_bus_id, health.gpu_index) == (
        "nvlink",
        "critical",
        "0000:c4:00.0",
        None,
    )
    assert health.detail == "nvidia-nvswitch1 SXid 24007: Fatal, Link 4"


def test_kmsg_timestamps_become_wall_time() -> None:
    metrics = AgentMetrics()
    source = KernelLogSource(
        "kmsg", lambda stop: iter(()), "n", GpuDirectory(), metrics, kernel_time=True
    )
    assert source.boot_ms is not None
    out: list[GpuXid | GpuHealth] = []
    source.handle_line("4,10,2000000,-;NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen", out.append)
    assert out[0].ts_ms == int(source.boot_ms + 2000)
