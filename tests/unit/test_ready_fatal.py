"""A lab daemon's fatal line counts from the node's boot: the start of the boot (spec.json),
not its pid file, which nodeinit writes once the services are launched and which can be a
second younger than a slurmctld that died at once (seen in a fresh-clone run: the deploy then
waited out its ready timeout instead of naming the fatal line)."""

import datetime
import os

from ctk.targets.local.ready import _fatal_since_boot


def stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def node(tmp_path, boot: float, pid_written: float, fatal_at: float):
    sd = tmp_path / "node"
    (sd / "log").mkdir(parents=True)
    for name, t in (("spec.json", boot), ("pid", pid_written)):
        (sd / name).write_text("{}")
        os.utime(sd / name, (t, t))
    log = sd / "log" / "slurmctld.log"
    log.write_text(f"[{stamp(boot - 600)}] slurmctld version 26.05.2 started on cluster lab\n"
                   f"[{stamp(fatal_at)}] fatal: CLUSTER NAME MISMATCH.\n")
    return str(sd), str(log)


def test_a_fatal_line_before_the_pid_file_but_after_the_boot_began_counts(tmp_path):
    boot = 1_800_000_000.2
    sd, log = node(tmp_path, boot, pid_written=boot + 1.6, fatal_at=boot + 0.5)
    assert _fatal_since_boot(log, sd)


def test_a_fatal_line_of_an_earlier_boot_does_not(tmp_path):
    boot = 1_800_000_000.2
    sd, log = node(tmp_path, boot, pid_written=boot + 1.6, fatal_at=boot - 30)
    assert not _fatal_since_boot(log, sd)


def test_a_node_that_never_booted_has_no_fatal_line(tmp_path):
    log = tmp_path / "slurmctld.log"
    log.write_text(f"[{stamp(1_800_000_000)}] fatal: CLUSTER NAME MISMATCH.\n")
    assert not _fatal_since_boot(str(log), str(tmp_path / "nowhere"))
