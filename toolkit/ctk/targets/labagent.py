"""The lab's agent: what a cloud does under a lab's dynamic, Spot and flex-start nodes.

A host process per lab (`python -m ctk.targets.labagent LAB/power/agent.json`), started by
`ctk deploy` and stopped by `ctk destroy`, that outlives the command that started it, as the
lab's nodes do. It reads requests, one file each, from LAB/power/requests/:

    resume HOSTLIST    slurmctld's ResumeProgram (a job was given powered-down nodes): boot
                       them from their image, as deploy boots static nodes. A flex-start node
                       boots once its capacity arrives (flex_start_delay seconds later).
    suspend HOSTLIST   slurmctld's SuspendProgram (idle past SuspendTime) and
                       ResumeFailProgram: stop them.
    preempt HOSTLIST [notice=SECONDS] [by=WHO]
                       `ctk preempt`: a Spot node's preemption, as Google Cloud does it. The
                       notice starts (the node's /run/ctk/preempted says TRUE, as the metadata
                       server's `preempted` does); when it ends Slurm powers the node down by
                       force (POWER_DOWN_FORCE: its jobs are requeued and get SIGTERM) and every
                       process of the node gets SIGTERM, then SIGKILL 10 s later. The next job
                       that needs the node powers it up again.

Slurm's reboots it carries out too: a node Slurm marks REBOOT_ISSUED (`scontrol reboot`, and the
reboot when idle of a roll-out of a changed image, which `ctk deploy` asks for) is stopped and
booted again from the spec it has now, so it comes back on its new image.

It also takes back flex-start nodes at their max_run_duration, and with chaos_interval set,
preempts a random powered-up Spot node at exponentially distributed intervals of that mean.
Everything it does is a JSON line in LAB/power/events.log (time, event, node, jobs, by whom).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..render.hostlist import compress, expand
from ..sandbox import DaemonError, netns
from ..sandbox import node as nodes
from ..sandbox.proc import running_pid
from .labclient import slurm
from .labstate import MEMORY_RESERVE_MB, NODE_MB, available_mb

POLL = 0.2  # seconds between looks at the request folder and the timers
# Run in a node under notice: its /run/ctk/preempted says TRUE, written whole.
PREEMPTED_SCRIPT = "mkdir -p /run/ctk && printf 'TRUE\\n' > /run/ctk/.preempted && mv -f /run/ctk/.preempted /run/ctk/preempted"
SYNC = 3.0  # seconds between looks at Slurm's view of the nodes (Agent.sync), from the start
# How long a node Slurm powers up must go without its resume request before sync boots it: Slurm
# marks the node powering up before its ResumeProgram has written the request.
RESUME_GRACE = 2 * SYNC
WORKERS = 8  # nodes booted or stopped at once
# A node rebooted this long ago is not rebooted again while Slurm still shows it REBOOT_ISSUED
# (until its slurmd registers, with a boot time after the reboot's).
REBOOT_SETTLE = 30.0


def request(power_dir: str, op: str, names: list[str], **kw: Any) -> str:
    """Hand the agent a request (written whole, then renamed: the agent never reads half of one)."""
    d = os.path.join(power_dir, "requests")
    os.makedirs(d, exist_ok=True)
    stamp = f"{time.time():.6f}.{os.getpid()}"
    tmp = os.path.join(d, f".{stamp}")
    with open(tmp, "w") as f:
        f.write(" ".join([op, compress(names), *(f"{k}={v}" for k, v in kw.items())]) + "\n")
    path = os.path.join(d, f"{stamp}.{op}")
    os.replace(tmp, path)
    return path


def image_version(lowerdirs: list[str]) -> str:
    """Which build of its image a node boots: the key of the image's top layer (LAYERS/KEY/root,
    first of the overlay's lowerdirs), which hashes every layer below it; "" for none."""
    return os.path.basename(os.path.dirname(lowerdirs[0])) if lowerdirs else ""


def read_events(power_dir: str) -> list[dict]:
    try:
        with open(os.path.join(power_dir, "events.log")) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def agent_pid(power_dir: str) -> int | None:
    """The running agent's pid, or None."""
    return running_pid(os.path.join(power_dir, "agent.pid"), "ctk.targets.labagent")


class Agent:
    def __init__(self, config_path: str):
        with open(config_path) as f:
            cfg = json.load(f)
        self.dir = cfg["deployment_dir"]
        self.n = cfg["n"]
        self.power = os.path.dirname(os.path.abspath(config_path))
        self.requests = os.path.join(self.power, "requests")
        self.nodes: dict[str, dict] = cfg["nodes"]
        self.notice = float(cfg["preemption_notice"])
        self.flex_delay = float(cfg["flex_start_delay"])
        self.flex_run = cfg.get("flex_run_duration")
        self.boot_delay = float(cfg.get("boot_delay") or 0)
        self.chaos = float(cfg.get("chaos_interval") or 0)
        seed = cfg.get("chaos_seed")
        self.rng = random.Random(seed)
        self.pool = ThreadPoolExecutor(WORKERS)
        self.lock = threading.Lock()
        self.busy: set[str] = set()  # nodes being booted, stopped or preempted
        self.capacity_at: dict[str, float] = {}  # flex-start nodes waiting: when they boot
        self.boot_at: dict[str, tuple[float, str]] = {}  # nodes booting (boot_delay): (when, why), epoch
        self.notices: dict[str, tuple[float, str]] = {}  # node: (when its SIGTERM comes, by whom)
        self.up_since: dict[str, float] = {}  # flex-start nodes: when they booted
        self.next_chaos = self._next_chaos(time.monotonic())
        for name, x in self.nodes.items():  # static flex-start nodes (booted by deploy) run from now
            if x.get("flex") and self.running(name):
                self.up_since[name] = time.monotonic()
        self.stopping = False
        self.next_sync = 0.0  # the first look is at once: an agent that was down finds what drifted
        self.powering_seen: dict[str, float] = {}  # sync: powering up in Slurm, no request seen: since
        self.rebooted: dict[str, float] = {}  # nodes this agent rebooted: when (monotonic)
        self.last_error: dict[str, str] = {}  # a Slurm command's last failure, while it repeats
        if self.chaos:
            self.event("chaos", mean_interval=self.chaos, seed=seed)

    # ---- records --------------------------------------------------------------------------

    def event(self, what: str, node: str | None = None, **kw: Any) -> None:
        rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime()) + f".{int(time.time() * 1000) % 1000:03d}",
               "epoch": round(time.time(), 3), "event": what}
        if node:
            rec["node"] = node
        rec.update(kw)
        with self.lock:
            with open(os.path.join(self.power, "events.log"), "a") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")

    def slurm(self, *argv: str) -> str | None:
        """One of the lab's Slurm commands (in its client node); its output, or None. A failure
        is an event, once while it repeats (a deploy restarting the client node fails every
        look at Slurm until it is back)."""
        try:
            r = slurm(self.dir, *argv, timeout=30, check=False)
            error = r.stderr.strip()[-500:] if r.returncode != 0 else None
        except Exception as e:  # noqa: BLE001 - the agent keeps going; the event says why
            error = str(e)
        key = " ".join(argv)
        if error is None:
            self.last_error.pop(key, None)
            return r.stdout
        if self.last_error.get(key) != error:
            self.last_error[key] = error
            self.event("slurm-error", command=key, error=error)
        return None

    # ---- nodes ----------------------------------------------------------------------------

    def state_dir(self, name: str) -> str:
        return self.nodes[name]["spec"]["state_dir"]

    def running(self, name: str) -> bool:
        """Up or booting (an agent killed while it booted the node left it booting)."""
        return nodes.node_alive(self.state_dir(name)) is not None

    def _boot(self, name: str, why: str, not_before: float = 0.0) -> None:
        x = self.nodes[name]
        try:
            if self.running(name):
                return
            while time.time() < not_before:
                time.sleep(min(0.05, not_before - time.time()))
            avail = available_mb()
            if avail is not None and avail - NODE_MB["compute"] < MEMORY_RESERVE_MB:
                self.event("refused", name, reason=f"{avail} MB of memory available, "
                           f"{MEMORY_RESERVE_MB} MB kept for jobs")
                self.slurm("scontrol", "update", f"NodeName={name}", "State=DOWN",
                           "Reason=ctk: this machine has no memory left for another node")
                return
            t0 = time.monotonic()
            netns.create(self.n, x["host"])
            nodes.boot(nodes.NodeSpec.from_dict(x["spec"]))
            if x.get("flex"):
                self.up_since[name] = time.monotonic()
            self.event("booted", name, why=why, seconds=round(time.monotonic() - t0, 2))
        except Exception as e:  # noqa: BLE001 - Slurm's ResumeTimeout then marks the node DOWN
            self.event("boot-failed", name, error=str(e)[-1000:])
        finally:
            with self.lock:
                self.busy.discard(name)

    def _stop(self, name: str, why: str) -> None:
        try:
            t0 = time.monotonic()
            was = nodes.stop(self.state_dir(name))
            netns.remove(self.n, self.nodes[name]["host"])
            self.up_since.pop(name, None)
            if was:
                self.event("stopped", name, why=why, seconds=round(time.monotonic() - t0, 2))
        finally:
            with self.lock:
                self.busy.discard(name)

    def _reboot(self, name: str) -> None:
        """Slurm rebooted NAME (REBOOT_ISSUED): stopped, and booted from its spec, at the
        earliest in the next second (slurmctld takes its registration only with a boot time
        after the reboot's)."""
        x = self.nodes[name]
        try:
            t0, issued = time.monotonic(), time.time()
            nodes.stop(self.state_dir(name))
            while time.time() < int(issued) + 1.0:
                time.sleep(0.05)
            netns.create(self.n, x["host"])
            nodes.boot(nodes.NodeSpec.from_dict(x["spec"]))
            self.event("rebooted", name, image=image_version(x["spec"]["lowerdirs"]),
                       seconds=round(time.monotonic() - t0, 2))
        except Exception as e:  # noqa: BLE001 - Slurm's ResumeTimeout then marks the node DOWN
            self.event("reboot-failed", name, error=str(e)[-1000:])
        finally:
            self.rebooted[name] = time.monotonic()  # failed or not: not again at the next look
            with self.lock:
                self.busy.discard(name)

    def _take_back(self, name: str, by: str) -> None:
        """The end of a preemption's notice (or of a flex-start node's run): Slurm requeues the
        node's jobs (POWER_DOWN_FORCE: its jobs are killed and requeued, the node is taken out
        of service and powered down), every process of the node gets SIGTERM, and it goes
        down. Powered down, it is idle again once SuspendTimeout has passed, and the next job
        that needs it powers it up, static or dynamic."""
        x = self.nodes[name]
        try:
            jobs = (self.slurm("squeue", "-h", "-w", name, "-o", "%i") or "").split()
            self.event("sigterm", name, by=by, jobs=jobs)
            self.slurm("scontrol", "update", f"NodeName={name}", "State=POWER_DOWN_FORCE", f"Reason=ctk: {by}")
            t0 = time.monotonic()
            nodes.stop(self.state_dir(name))
            netns.remove(self.n, x["host"])
            self.up_since.pop(name, None)
            # DOWN as well: slurmctld stops waiting for the gone node to end its jobs (they
            # would be COMPLETING until it gave up on the node), and requeues them now.
            self.slurm("scontrol", "update", f"NodeName={name}", "State=DOWN", f"Reason=ctk: {by}")
            self.next_sync = 0.0  # look again soon: the DOWN of a take-back comes late
            self.event("down", name, by=by, seconds=round(time.monotonic() - t0, 2))
        except Exception as e:  # noqa: BLE001 - recorded; the agent keeps going
            self.event("error", name, during=by, error=str(e)[-1000:])
        finally:
            with self.lock:
                self.busy.discard(name)

    def submit(self, name: str, fn, *args) -> bool:
        with self.lock:
            if name in self.busy:
                return False
            self.busy.add(name)
        self.pool.submit(fn, name, *args)
        return True

    # ---- requests ------------------------------------------------------------------------

    def handle(self, line: str, sent: float = 0.0) -> None:
        """One request line; SENT: when it was made (the epoch seconds of its file name)."""
        words = line.split()
        if len(words) < 2:
            return
        # power requests are for the nodes that power up and down or are preempted; the agent
        # knows every compute node (for Slurm's reboots), a static one is left alone
        op, names = words[0], [n for n in expand(words[1]) if n in self.nodes
                               and (self.nodes[n].get("dynamic") or self.nodes[n].get("spot"))]
        opts = dict(w.split("=", 1) for w in words[2:] if "=" in w)
        now = time.monotonic()
        for name in names:
            if op == "resume":
                if self.nodes[name].get("flex") and self.flex_delay > 0:
                    self.capacity_at[name] = now + self.flex_delay
                    self.event("waiting-for-capacity", name, seconds=self.flex_delay)
                else:
                    self.boot_at[name] = (self.boot_time(sent), "resume")
            elif op == "suspend":
                self.capacity_at.pop(name, None)
                self.boot_at.pop(name, None)
                self.notices.pop(name, None)
                if self.running(name):
                    self.submit(name, self._stop, "suspend")
            elif op == "preempt":
                if not self.running(name) or name in self.notices:
                    continue
                notice, by = float(opts.get("notice", self.notice)), opts.get("by", "ctk preempt")
                # the notice runs from when the node can read it: the SIGTERM comes a whole
                # notice after the node's /run/ctk/preempted says TRUE (the write into the
                # node can take a while on a busy host)
                self._mark_preempted(name)
                self.notices[name] = (time.monotonic() + notice, by)
                self.event("notice", name, by=by, seconds=notice)

    def boot_time(self, sent: float) -> float:
        """When a node resumed by a request made at SENT boots: boot_delay later, and at the
        earliest in the second after SENT (slurmctld takes a node's registration only if the node
        booted after the resume request, its boot time being now - uptime in whole seconds)."""
        return max(int(sent) + 1.0, sent + self.boot_delay)

    def _mark_preempted(self, name: str) -> None:
        """The node's own view of its notice: /run/ctk/preempted (the metadata server's
        instance/preempted) says TRUE. Written by a process in the node, as the node's root: a
        path the node resolves itself (its root may have made /run/ctk a symlink)."""
        sd = self.state_dir(name)
        try:
            r = subprocess.run(nodes.exec_argv(sd, ["/bin/sh", "-c", PREEMPTED_SCRIPT]), capture_output=True, text=True, timeout=15)
        except (DaemonError, subprocess.TimeoutExpired) as e:
            self.event("notice-not-written", name, error=str(e))
            return
        if r.returncode != 0:
            self.event("notice-not-written", name, error=r.stderr.strip()[-300:])

    def _next_chaos(self, now: float) -> float | None:
        return now + self.rng.expovariate(1 / self.chaos) if self.chaos > 0 else None

    def sync(self) -> None:
        """Where Slurm's view of our nodes and ours differ, put it right (what slurm-gcp's
        slurmsync does for a cloud), at the start and every SYNC seconds:
        - DOWN and powered down (a take-back whose DOWN came after its power-down began, or a
          node whose boot no one did while the agent was down, past ResumeTimeout): powered
          down again, which makes it idle (idle_on_node_suspend) and usable by the next job;
        - powering up (a resume this agent never saw: it died after taking the request), for
          RESUME_GRACE with no request in that time (one under way is not yet in the folder): booted;
        - powered down in Slurm, yet running here (a suspend it never saw): stopped;
        - REBOOT_ISSUED (^): rebooted, once (_reboot)."""
        out = self.slurm("sinfo", "-h", "-N", "-o", "%N %T") or ""
        states = {name: st for name, st in (ln.split() for ln in out.splitlines() if len(ln.split()) == 2)
                  if name in self.nodes}
        with self.lock:
            busy = set(self.busy)
        now = time.monotonic()
        for name in list(self.powering_seen):
            if not states.get(name, "").endswith("#"):
                del self.powering_seen[name]
        for name, st in sorted(states.items()):
            if name in busy or name in self.notices or name in self.boot_at or name in self.capacity_at:
                self.powering_seen.pop(name, None)
                continue  # ours is under way
            running = self.running(name)
            if "^" in st:
                if now - self.rebooted.get(name, -REBOOT_SETTLE) >= REBOOT_SETTLE and self.submit(name, self._reboot):
                    self.event("reboot", name, state=st)
                continue
            if st.startswith("down") and st.endswith("~") and not running:
                self.slurm("scontrol", "update", f"NodeName={name}", "State=POWER_DOWN_FORCE",
                           "Reason=ctk: powered down again to be usable")
                self.event("resynced", name, state=st, action="powered down again")
            elif not self.nodes[name].get("dynamic"):
                continue  # a static node powers neither up nor down
            elif st.endswith("#") and not running:
                if now - self.powering_seen.setdefault(name, now) < RESUME_GRACE:
                    continue  # its request may be on its way
                del self.powering_seen[name]
                if self.submit(name, self._boot, "resynced: Slurm is powering it up"):
                    self.event("resynced", name, state=st, action="booted")
            elif st.endswith("~") and running and not st.startswith("down"):
                if self.submit(name, self._stop, "resynced: Slurm holds it powered down"):
                    self.event("resynced", name, state=st, action="stopped")

    def tick(self) -> None:
        try:
            names = sorted(f for f in os.listdir(self.requests) if not f.startswith("."))
        except FileNotFoundError:
            names = []
        for f in names:
            path = os.path.join(self.requests, f)
            try:
                with open(path) as fh:
                    text = fh.read()
                os.unlink(path)
            except OSError:
                continue
            try:
                sent = float(".".join(f.split(".")[:2]))
            except ValueError:
                sent = time.time()
            for line in text.splitlines():
                self.handle(line, sent)
        now = time.monotonic()
        for name, at in list(self.capacity_at.items()):
            if at <= now:
                del self.capacity_at[name]
                self.boot_at[name] = (time.time() + self.boot_delay, "flex-start capacity arrived")
        wall = time.time()
        for name, (at, why) in list(self.boot_at.items()):
            if at - POLL <= wall and self.submit(name, self._boot, why, at):
                del self.boot_at[name]
        for name, (at, by) in list(self.notices.items()):
            if at <= now and self.submit(name, self._take_back, by):
                del self.notices[name]
        for name, since in list(self.up_since.items()):
            run = self.flex_run or self.nodes[name].get("flex")
            if run and now - since >= run and name not in self.notices:
                if self.submit(name, self._take_back, f"flex-start max_run_duration ({run} s)"):
                    self.up_since.pop(name, None)
        if now >= self.next_sync:
            self.next_sync = now + SYNC
            self.sync()
        if self.next_chaos is not None and now >= self.next_chaos:
            self.next_chaos = self._next_chaos(now)
            with self.lock:
                busy = set(self.busy)
            spot = [n for n, x in self.nodes.items()
                    if x.get("spot") and n not in busy and n not in self.notices and self.running(n)]
            if spot:
                victim = self.rng.choice(sorted(spot))
                self.handle(f"preempt {victim} by=chaos")
            else:
                self.event("chaos-idle", reason="no powered-up Spot node")

    def run(self) -> int:
        def on_term(signum, frame):
            self.stopping = True

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        os.makedirs(self.requests, exist_ok=True)
        tmp = os.path.join(self.power, "agent.pid.tmp")
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, os.path.join(self.power, "agent.pid"))
        self.event("agent-started", nodes=len(self.nodes))
        while not self.stopping:
            self.tick()
            time.sleep(POLL)
        self.pool.shutdown(wait=True)
        self.event("agent-stopped")
        return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m ctk.targets.labagent LAB/power/agent.json\n")
        return 2
    return Agent(argv[0]).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
