"""The job options of `ctk job render/submit` that every template takes: --time, --mem,
--ntasks-per-node, --dependency, --env, --chdir and --sbatch. Each becomes one `#SBATCH` line
after the template's own (the later line wins, as on sbatch's command line) or, for --env, one
`export` after them, so the script shows exactly what the job gets. Every value is checked
against a strict pattern first: none can add a line or a shell word to the script."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UserError
from .templates import PATTERNS, clip, envname, q

_MEM = re.compile(r"\d{1,9}[KMGT]?")
_ONE_DEP = r"(?:singleton|after(?:any|ok|notok|corr|burstbuffer)?(?::\d{1,10}(?:_\d{1,10})?(?:\+\d{1,6})?)+)"
_DEP = re.compile(rf"{_ONE_DEP}(?:[,?]{_ONE_DEP}){{0,63}}")
_CHDIR = re.compile(r"/[A-Za-z0-9_./%+-]{0,1023}")
MAX_NTASKS = 4096


@dataclass(frozen=True)
class JobOptions:
    time: str | None = None
    mem: str | None = None
    ntasks_per_node: int | None = None
    dependency: str | None = None
    env: tuple[str, ...] = ()
    chdir: str | None = None
    sbatch: tuple[str, ...] = ()

    def check(self) -> JobOptions:
        """Self, or a UserError naming the flag."""
        if self.time is not None and not PATTERNS["time"][0].fullmatch(self.time):
            raise UserError(f"--time {clip(self.time)}: expected {PATTERNS['time'][1]}", hint="--time 02:00:00")
        if self.mem is not None and not _MEM.fullmatch(self.mem):
            raise UserError(f"--mem {clip(self.mem)}: expected a size per node in MB, or with K, M, G or T",
                            hint="--mem 4G")
        if self.ntasks_per_node is not None and not 1 <= self.ntasks_per_node <= MAX_NTASKS:
            raise UserError(f"--ntasks-per-node {self.ntasks_per_node}: expected 1 to {MAX_NTASKS}",
                            hint="--ntasks-per-node 8 (one process per GPU of an 8-GPU node)")
        if self.dependency is not None and not _DEP.fullmatch(self.dependency):
            raise UserError(f"--dependency {clip(self.dependency)}: expected Slurm's TYPE:JOBID[:JOBID...] "
                            "(after, afterany, afterok, afternotok, aftercorr) joined by , or ?, or singleton",
                            hint="--dependency afterok:12")
        for kv in self.env:
            name, eq, _ = kv.partition("=")
            if not eq:
                raise UserError(f"--env {clip(kv)}: expected NAME=VALUE", hint="--env WANDB_MODE=offline")
            envname(name)
            if "\x00" in kv:
                raise UserError(f"--env {clip(name)}: the value contains a NUL character")
        if self.chdir is not None and (not _CHDIR.fullmatch(self.chdir) or "/../" in self.chdir + "/"):
            raise UserError(f"--chdir {clip(self.chdir)}: expected an absolute path on the cluster, of letters, "
                            "digits and _./%+- (no ..)", hint="--chdir /home/USER/project")
        for opt in self.sbatch:
            if not opt.startswith("-") or opt in ("-", "--") or "\n" in opt or "\r" in opt or "\x00" in opt:
                raise UserError(f"--sbatch {clip(opt)}: an sbatch option such as --dependency=afterok:12, as one "
                                "word", hint="--sbatch=--hold")
        return self

    def lines(self, with_sbatch: bool = True) -> list[str]:
        """The `#SBATCH` options these flags add (WITH_SBATCH: --sbatch's too)."""
        out = []
        if self.time is not None:
            out.append(f"--time={self.time}")
        if self.mem is not None:
            out.append(f"--mem={self.mem}")
        if self.ntasks_per_node is not None:
            out.append(f"--ntasks-per-node={self.ntasks_per_node}")
        if self.dependency is not None:
            out.append(f"--dependency={self.dependency}")
        if self.chdir is not None:
            out.append(f"--chdir={self.chdir}")
        if with_sbatch:
            out += list(self.sbatch)
        return out

    def apply(self, script: str, with_sbatch: bool = True) -> str:
        """SCRIPT with these options after its own #SBATCH lines and the --env exports after
        those (before the first command)."""
        add = [f"#SBATCH {x}\n" for x in self.lines(with_sbatch)]
        exports = [f"export {kv.partition('=')[0]}={q(kv.partition('=')[2])}\n" for kv in self.env]
        if not add and not exports:
            return script
        lines = script.splitlines(keepends=True)
        end = 0  # after the last line of the header (shebang, comments, #SBATCH, blank)
        last_sbatch = 0
        for i, line in enumerate(lines):
            s = line.strip()
            if s and not s.startswith("#"):
                break
            end = i + 1
            if s.startswith("#SBATCH"):
                last_sbatch = i + 1
        at = last_sbatch or min(1, len(lines))
        head = lines[:at] + (["# ctk job options:\n"] + add if add else [])
        middle = lines[at:end]
        body = lines[end:]
        env = (["# ctk job --env:\n"] + exports + ["\n"]) if exports else []
        return "".join(head + middle + env + body)
