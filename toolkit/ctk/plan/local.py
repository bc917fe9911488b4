"""The local target's planning: the lab's rehearsal settings (a ctk/target/local module's, or
their defaults without one), and the waits they add to a resumed node, against its partitions'
ResumeTimeout."""

from __future__ import annotations

import re

from ..blueprint.errors import Collector
from ..blueprint.expand import Expanded, ExpandedModule, setting_pos
from ..model import (
    LAB_IDS,
    NO_SPOT_HINT,
    SERVICE_IDS,
    Controller,
    Deployment,
    LabSettings,
    Partition,
)
from .values import module_of, num_of

_LAB_NUMBERS = ("chaos_interval", "preemption_notice", "flex_start_delay", "flex_run_duration", "boot_delay")


def plan_local(exp: Expanded, dep: Deployment, em: ExpandedModule | None, c: Collector) -> LabSettings:
    """The lab's settings: EM's (a ctk/target/local module), checked at their lines, or the
    defaults where the blueprint has none."""
    lab = LabSettings()
    if em is not None:
        for name in (*_LAB_NUMBERS, "chaos_seed"):
            v = em.get(name)
            n = num_of(v)
            if n is None:
                continue  # unset or deferred (a wrong type was reported by validate)
            if n < 0 or (name == "chaos_seed" and not isinstance(n, int)):
                inp = em.schema.input(name) if em.schema else None
                assert inp is not None  # ctk/target/local declares each of these settings
                c.add(f"setting '{name}' of module '{em.id}' must be a {'whole ' if name == 'chaos_seed' else ''}"
                      f"number >= 0, found {v!r}",
                      setting_pos(exp, em, name), inp.doc)
                continue
            setattr(lab, name, n if name == "chaos_seed" else float(n))
        _lab_user(exp, em, lab, c)
        if lab.chaos_interval and not any(ns.spot for ns in dep.nodesets):
            c.add(f"setting 'chaos_interval' of module '{em.id}' preempts random Spot nodes, but no nodeset of "
                  "this blueprint is Spot or preemptible: there would be nothing to preempt",
                  setting_pos(exp, em, "chaos_interval"), NO_SPOT_HINT + ", or remove chaos_interval")
    _resume_waits(exp, dep, lab, em, c)
    return lab


# Names the lab's user cannot take: root, and the accounts its images have or make.
_RESERVED_USERS = ("root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
                   "www-data", "backup", "list", "irc", "_apt", "nobody", "munge", "slurm", "mysql", "sshd",
                   "messagebus", "systemd-network")


def _lab_user(exp: Expanded, em: ExpandedModule, lab: LabSettings, c: Collector) -> None:
    """The lab's user account (settings user, user_uid), checked at their lines."""
    name = em.get("user")
    if isinstance(name, str):
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", name):
            c.add(f"setting 'user' of module '{em.id}': {name!r} is not a user name",
                  setting_pos(exp, em, "user"), "lower-case letters, digits, '_' and '-', starting with a letter "
                  "or '_', at most 32 characters: for example researcher")
        elif name in _RESERVED_USERS:
            c.add(f"setting 'user' of module '{em.id}': {name!r} is root or one of the image's service accounts",
                  setting_pos(exp, em, "user"), "name an ordinary user, for example researcher; root jobs stay "
                  "possible with ctk env --user root")
        else:
            lab.user = name
    uid = num_of(em.get("user_uid"))
    if uid is not None:
        lo, hi = LAB_IDS.start, SERVICE_IDS.start - 1
        if not isinstance(uid, int) or not lo <= uid <= hi:
            c.add(f"setting 'user_uid' of module '{em.id}' must be a whole number from {lo} to {hi}, found {uid!r}",
                  setting_pos(exp, em, "user_uid"), "ctk keeps the lab's accounts in numbers no host account has; "
                  f"its services take {SERVICE_IDS.start} and up")
        else:
            lab.user_uid = uid


def _resume_timeout(exp: Expanded, dep: Deployment, p: Partition):
    """A partition's ResumeTimeout on the lab, where it was said, and whether it is the
    partition's own (partition_conf or resume_timeout) rather than the controller's (whose
    place is None when it is the default)."""
    pem = module_of(exp, p.module_id)
    n = num_of(p.conf.get("ResumeTimeout"))
    if n is not None:
        conf = pem.get("partition_conf")
        if isinstance(conf, dict) and "ResumeTimeout" in conf:
            return n, setting_pos(exp, pem, "partition_conf", "ResumeTimeout"), True
        return n, setting_pos(exp, pem, "resume_timeout"), True
    ctl = dep.controller
    cem = module_of(exp, ctl.module_id) if ctl and ctl.module_id else None
    params = cem.get("cloud_parameters") if cem else None
    where = (setting_pos(exp, cem, "cloud_parameters", "resume_timeout")
             if cem is not None and isinstance(params, dict) and params.get("resume_timeout") is not None else None)
    return (ctl.resume_timeout if ctl else Controller.resume_timeout), where, False


def _resume_waits(exp: Expanded, dep: Deployment, lab: LabSettings, em: ExpandedModule | None,
                  c: Collector) -> None:
    """On the lab a resumed node boots boot_delay after slurmctld asks, a flex-start one after
    waiting flex_start_delay for its capacity as well: that must stay below its partitions'
    ResumeTimeout, or Slurm marks the node DOWN first. The error is at the partition's own
    timeout where it has one, else at the lab's setting."""
    reported: set = set()  # one error per place: a controller's timeout covers every nodeset

    def said(name: str) -> bool:
        return em is not None and (name in em.explicit or name in em.from_vars)

    for ns in dep.nodesets:
        flex = ns.flex_max_run_duration is not None
        if not (flex or ns.spot or ns.node_count_dynamic_max):
            continue  # static nodes boot with the lab
        if flex:
            wait = lab.flex_start_delay + lab.boot_delay
            what = (f"flex-start nodeset '{ns.name}' waits {lab.flex_start_delay:g} s for capacity on the lab "
                    "(flex_start_delay)" + (f" and {lab.boot_delay:g} s to boot (boot_delay)" if lab.boot_delay else ""))
            setting = "flex_start_delay" if said("flex_start_delay") or not said("boot_delay") else "boot_delay"
            lower = "flex_start_delay" + (" + boot_delay" if lab.boot_delay else "")
            before = "the capacity arrives" if not lab.boot_delay else "they boot"
        elif lab.boot_delay:
            wait, setting, lower, before = lab.boot_delay, "boot_delay", "boot_delay", "they boot"
            what = f"the nodes of nodeset '{ns.name}' take {lab.boot_delay:g} s to boot on the lab (boot_delay)"
        else:
            continue
        for p in dep.partitions:
            if ns.name not in p.nodesets:
                continue
            timeout, where, own = _resume_timeout(exp, dep, p)
            if wait < timeout:
                continue
            if not own and em is not None and said(setting):
                where = setting_pos(exp, em, setting)
            if where is None:
                where = exp.blueprint.doc.pos(module_of(exp, ns.module_id).module.path + ("id",))
            if where in reported:
                continue
            reported.add(where)
            c.add(f"{what}, not less than partition '{p.name}''s ResumeTimeout of {timeout:g} s: Slurm would mark "
                  f"its nodes DOWN before {before}",
                  where, f"lower {lower}{f' in {em.id!r}' if em else ' (a ctk/target/local module)'} "
                         f"below {timeout:g}, or raise the partition's resume_timeout")
