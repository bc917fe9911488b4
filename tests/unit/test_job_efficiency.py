"""ctk job efficiency's arithmetic on sacct's own text (as a lab's Slurm 24.11 printed it)."""

import pytest

from ctk.jobs.efficiency import cpu_seconds, mem_bytes, parse_sacct, report, sacct_argv

# `sacct -n -P -j 1702 -o <SACCT_FIELDS>` of a 1-CPU job that held 210 MiB for 10 s
SACCT = """\
1702|wrap|COMPLETED|0:0|1|1|10|00:06.123||4G|billing=1,cpu=1,mem=4G,node=1
1702.batch|batch|COMPLETED|0:0|1|1|10|00:06.123|210M||cpu=1,mem=4G,node=1
"""


@pytest.mark.parametrize("text, seconds", [("00:06.123", 6.123), ("01:02:03", 3723), ("2-00:00:01", 172801),
                                           ("12:30", 750), ("", 0)])
def test_total_cpu_as_seconds(text, seconds):
    assert cpu_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text, unit, n", [("210M", "", 210 << 20), ("1234K", "", 1234 << 10), ("4G", "", 4 << 30),
                                           ("2000", "M", 2000 << 20), ("512", "", 512), ("", "", None)])
def test_memory_figures_as_bytes(text, unit, n):
    assert mem_bytes(text, unit) == n


def test_a_job_line_and_its_steps_make_one_report():
    [e] = parse_sacct(SACCT)
    assert (e.job, e.state, e.cpus, e.nodes, e.elapsed_s) == ("1702", "COMPLETED", 1, 1, 10)
    assert e.max_rss_bytes == 210 << 20 and e.mem_bytes == 4 << 30
    assert e.cpu_efficiency == pytest.approx(0.6123)
    assert e.mem_efficiency == pytest.approx(210 / 4096)
    assert report(e) == ("Job 1702 (wrap): COMPLETED, exit code 0:0\n"
                         "  Nodes: 1  CPUs: 1  Wall-clock: 00:00:10\n"
                         "  CPU efficiency: 61.2% (00:00:06 of 00:00:10 core-walltime)\n"
                         "  Memory efficiency: 5.1% (210.00 MiB of 4.00 GiB)\n")


def test_array_tasks_are_reported_apart_and_a_job_without_samples_says_so():
    text = SACCT.replace("1702", "7_0") + SACCT.replace("1702", "7_1").replace("210M", "")
    a, b = parse_sacct(text)
    assert (a.job, b.job) == ("7_0", "7_1")
    assert b.max_rss_bytes is None and b.mem_efficiency is None
    assert "Memory efficiency: - (- of 4.00 GiB)" in report(b)
    assert sacct_argv("7")[:5] == ["sacct", "-n", "-P", "-j", "7"]
