"""sbatch templates (ctk job render): every variant is valid bash and clean under shellcheck;
no value can change a script's #SBATCH header or run anything; golden scripts; bad input."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from ctk import paths
from ctk.cli import main
from ctk.errors import UserError
from ctk.jobs import templates
from ctk.model import Deployment

GOLDEN = os.path.join(ROOT, "tests", "golden", "jobs")
CMD = ["python3", "train.py", "--steps", "10"]
NEEDS = {"array": {"sweep": ["--lr=0.1 --bs=32", "--lr=0.2"]}, "container": {"image": "nvcr.io#nvidia/jax:25.04-py3"}}
# maxtext's command is MaxText settings, KEY=VALUE, not a program.
MAXTEXT_CMD = ["base_emb_dim=256", "learning_rate=1e-3"]


def cmd_for(name: str) -> list[str]:
    return MAXTEXT_CMD if name == "maxtext" else CMD

VARIANTS = {
    "cpu": {"accelerator": "cpu", "nodes": 2},
    "gpu-tcp": {"accelerator": "gpu", "network": "tcp", "nodes": 2},
    "gpu-tcpx": {"accelerator": "gpu", "network": "gpudirect-tcpx", "nodes": 2},
    "gpu-tcpxo": {"accelerator": "gpu", "network": "gpudirect-tcpxo", "nodes": 2},
    "gpu-rdma": {"accelerator": "gpu", "network": "rdma", "nodes": 2, "nccl_ctrl_dev": "eth0,eth1"},
    "tpu": {"accelerator": "tpu", "tpu_type": "v5p-8", "nodes": 2},
    "tpu-multislice": {"accelerator": "tpu", "tpu_type": "v5p-8", "nodes": 4, "num_slices": 2},
}


def _dep(name: str) -> Deployment:
    with open(os.path.join(ROOT, "tests", "golden", name, "deployment.json")) as f:
        return Deployment.from_dict(json.load(f))


def _cases():
    for name in templates.list_templates():
        for variant, params in VARIANTS.items():
            tpl = templates.load_template(name)
            own = {k: v for k, v in params.items() if k in tpl.params}
            if name in ("array", "container") and variant not in ("cpu", "gpu-tcp"):
                continue  # no accelerator parameters: one variant is enough
            for pre in (False, True):
                p = dict(NEEDS.get(name, {}), **own, preemptible=pre)
                if pre:
                    p["checkpoint_hook"] = ["python3", "save.py", "--now"]
                yield pytest.param(name, p, id=f"{name}-{variant}-{'preempt' if pre else 'plain'}")


def header(script: str) -> list[str]:
    return [line for line in script.split("\n") if line.startswith("#SBATCH")]


@pytest.mark.parametrize("name,params", list(_cases()))
def test_renders_and_passes_bash_n_and_shellcheck(name, params):
    script = templates.render(name, params, cmd_for(name))
    assert script.startswith("#!/bin/bash\n")
    assert "--nodes=" in script and "srun " in script
    if params.get("preemptible"):
        for line in ("#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --signal=B:USR2@90"):
            assert line in script
        assert 'scontrol requeue "$SLURM_JOB_ID"' in script and "trap ctk_on_usr2 USR2" in script
    assert "CTK_RESTART_COUNT" in script and "USR1" not in script.replace("USR1 is not used", "")
    r = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["shellcheck", "-s", "bash", "-"], input=script, text=True, capture_output=True)
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr


def test_accelerator_specifics():
    gpu = templates.render("jax-train", VARIANTS["gpu-tcpxo"], CMD)
    assert "#SBATCH --ntasks-per-node=8" in gpu and "#SBATCH --gpus-per-node=8" in gpu
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in gpu and "XLA_PYTHON_CLIENT_MEM_FRACTION" in gpu
    assert "NCCL_FASTRAK_IFNAME" in gpu and "JAX_COORDINATOR_PORT" in gpu
    assert "NCCL_NET=gIB" not in gpu and "nccl-env-profile.sh" in gpu
    assert "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME" in templates.render("jax-train", VARIANTS["gpu-tcpx"], CMD)
    assert "set_nccl_env.sh" in templates.render("jax-train", VARIANTS["gpu-rdma"], CMD)
    assert "NCCL_NET=Socket" in templates.render("jax-train", VARIANTS["gpu-tcp"], CMD)
    untuned = templates.render("jax-train", dict(VARIANTS["gpu-tcp"], xla_tuned=False), CMD)
    assert "XLA_FLAGS" not in untuned
    tpu = templates.render("jax-train", VARIANTS["tpu-multislice"], CMD)
    assert "#SBATCH --ntasks-per-node=1" in tpu and "LIBTPU_INIT_ARGS" in tpu
    for var in ("MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES=2", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT"):
        assert var in tpu
    assert "MEGASCALE" not in templates.render("jax-train", VARIANTS["tpu"], CMD)
    arr = templates.render("array", {"sweep": ["a", "b", "c"], "max_parallel": 2}, CMD)
    assert "#SBATCH --array=0-2%2" in arr
    cont = templates.render("container", dict(NEEDS["container"], mounts=["/data:/data"], env=["A=1 2"]), CMD)
    assert "--container-image=" in cont and "--container-mounts=/data:/data" in cont
    assert "--container-env=CTK_RESTART_COUNT,A" in cont and "export A='1 2'" in cont


def _tpu_slice_ids(script: str, nodes: int) -> list[str]:
    """Run the multislice srun wrapper as each node would: the slice id per SLURM_NODEID."""
    line = next(x for x in script.split("\n") if x.startswith("srun "))
    words = shlex.split(line)
    i = words.index("bash")
    out = []
    for node in range(nodes):
        env = dict(os.environ, SLURM_NODEID=str(node), CTK_HOSTS_PER_SLICE="2")
        r = subprocess.run(words[i:i + 4] + ["sh", "-c", 'echo "$MEGASCALE_SLICE_ID"'], env=env,
                           capture_output=True, text=True, check=True)
        out.append(r.stdout.strip())
    return out


def test_tpu_slice_id_per_node():
    script = templates.render("jax-train", VARIANTS["tpu-multislice"], CMD)
    assert _tpu_slice_ids(script, 4) == ["0", "0", "1", "1"]


def test_uneven_slices_rejected():
    with pytest.raises(UserError, match="num_slices"):
        templates.render("jax-train", {"accelerator": "tpu", "nodes": 3, "num_slices": 2}, CMD)


# ---- property tests: values reach the program verbatim, nothing else runs ----------------

DANGEROUS = ["$(touch {m})", "`touch {m}`", "'; touch {m}; '", "\"; touch {m}; \"", "\n#SBATCH --nodes=99\n",
             "x\ntouch {m}\n", "${{IFS}}touch${{IFS}}{m}", "\\", "'", "--", "-c", "ü日本\u2028\x85", "a\rb\tc\x1b[0m",
             "#SBATCH --partition=evil", "CTK_PY_END\ntouch {m}", "$'\\n'"]


def _text(marker):
    danger = st.sampled_from(DANGEROUS).map(lambda s: s.format(m=marker))
    return st.one_of(danger, st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                                     max_size=40))


def _run_stubbed(script: str, workdir: str) -> list[str]:
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir, exist_ok=True)
    argv_file = os.path.join(workdir, "argv")
    with open(os.path.join(bindir, "srun"), "w") as f:
        f.write(f'#!/bin/bash\nprintf "%s\\0" "$@" > {shlex.quote(argv_file)}\n')
    with open(os.path.join(bindir, "scontrol"), "w") as f:
        f.write("#!/bin/bash\necho node-0\n")
    for n in ("srun", "scontrol"):
        os.chmod(os.path.join(bindir, n), 0o755)
    path = os.path.join(workdir, "job.sh")
    with open(path, "w", encoding="utf-8") as f:
        f.write(script)
    env = {"PATH": bindir + ":/usr/bin:/bin", "SLURM_JOB_NODELIST": "node-0", "SLURM_JOB_ID": "7",
           "SLURM_ARRAY_TASK_ID": "0", "HOME": workdir, "LANG": "C.UTF-8"}
    r = subprocess.run(["bash", path], cwd=workdir, env=env, capture_output=True, timeout=20)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    with open(argv_file, "rb") as f:
        data = f.read()
    return [w.decode("utf-8") for w in data.split(b"\0")[:-1]]


def _fuzzable(name):
    tpl = templates.load_template(name)
    return sorted(p.name for p in tpl.params.values() if p.type in ("str", "list"))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_value_reaches_the_program_verbatim_and_runs_nothing(data):
    name = data.draw(st.sampled_from(templates.list_templates()), label="template")
    variant = data.draw(st.sampled_from(sorted(VARIANTS)), label="variant")
    tpl = templates.load_template(name)
    base = dict(NEEDS.get(name, {}), **{k: v for k, v in VARIANTS[variant].items() if k in tpl.params})
    base["preemptible"] = data.draw(st.booleans(), label="preemptible")
    with tempfile.TemporaryDirectory() as work:
        marker = os.path.join(work, "pwned")
        text = _text(marker)
        command = data.draw(st.lists(text, min_size=1, max_size=4), label="command")
        if name == "maxtext":  # MaxText settings: any value after a key
            command = [f"key{i}={word}" for i, word in enumerate(command)]
        key = data.draw(st.sampled_from(_fuzzable(name)), label="param")
        ptype = tpl.params[key].type
        value = data.draw(st.lists(text, min_size=1, max_size=3) if ptype == "list" else text, label="value")
        prog = ["key=prog"] if name == "maxtext" else ["prog"]
        plain = templates.render(name, base, prog)
        try:
            script = templates.render(name, dict(base, **{key: value}), command)
        except UserError:
            return  # rejected (a value not allowed in an #SBATCH line, an unsplittable sweep entry ...)
        expect_header = header(templates.render(name, dict(base, **{key: value}), prog))
        if key not in ("job_name", "partition", "time", "output_dir", "sweep", "image", "mounts", "env",
                       "accelerator", "network", "tpu_type"):
            assert expect_header == header(plain)  # free-text values never touch the header
        assert header(script) == expect_header  # the command never touches it either
        for line in expect_header:
            assert "\n" not in line and "evil" not in line and "99" not in line
        argv = _run_stubbed(script, work)
        assert not os.path.exists(marker)
        tail = list(command)
        if name == "array":
            sweep = dict(base, **{key: value})["sweep"]
            tail += shlex.split(sweep[0])
        if name == "jax-smoke":
            assert argv[-2] == "-c"
            tail += ["-c", argv[-1]]
        assert argv[-len(tail):] == tail


# ---- golden scripts -----------------------------------------------------------------------

GOLDEN_CASES = {
    "jax-train-gpu-a3mega.sbatch": ("ct-a3mega", {"nodes": 2, "preemptible": True,
                                                  "checkpoint_hook": ["python3", "save.py"]}),
    "jax-train-tpu-multislice.sbatch": ("ct-hpc-slurm6-tpu", {"nodes": 4, "num_slices": 2}),
    "jax-train-cpu.sbatch": ("lab", {"nodes": 2}),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden(case, capsys):
    dep_name, params = GOLDEN_CASES[case]
    sets = [f"--set={k}={v if not isinstance(v, list) else ','.join(v)}" for k, v in params.items()]
    dep_dir = os.path.join(ROOT, "tests", "golden", dep_name)
    assert main(["job", "render", "jax-train", *sets, "--deployment", dep_dir, "--", *CMD]) == 0
    got = capsys.readouterr().out
    path = os.path.join(GOLDEN, case)
    if os.environ.get("CTK_UPDATE_GOLDEN"):
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w") as f:
            f.write(got)
    with open(path) as f:
        assert got == f.read(), f"{case} differs; regenerate with CTK_UPDATE_GOLDEN=1 and review the diff"


def test_deployment_facts():
    facts = templates.cluster_facts(_dep("ct-a3mega"), None)
    assert facts == {"accelerator": "gpu", "network": "gpudirect-tcpxo", "partition": "a3mega", "gpus_per_node": 8,
                     "container_runtime": "oci", "container_images": []}
    assert templates.cluster_facts(_dep("ct-a3mega"), "debugnodeset")["accelerator"] == "cpu"
    assert templates.cluster_facts(_dep("ct-a3ultra"), None)["network"] == "rdma"
    tpu = templates.cluster_facts(_dep("ct-hpc-slurm6-tpu"), None)
    assert tpu["accelerator"] == "tpu" and tpu["tpu_type"] == "v3-8" and tpu["tpu_chips_per_host"] == 4


# ---- bad input ----------------------------------------------------------------------------

@pytest.mark.parametrize("argv,expect", [
    (["job", "render", "jax-trian", "--", "x"], "did you mean 'jax-train'"),
    (["job", "render", "jax-train", "--set", "nodse=2", "--", "x"], "did you mean 'nodes'"),
    (["job", "render", "jax-train", "--set", "nodes=abc", "--", "x"], "--set nodes=abc"),
    (["job", "render", "jax-train", "--nodes", "abc", "--", "x"], "expected int"),
    (["job", "render", "jax-train", "--set", "preemptible=maybe", "--", "x"], "true or false"),
    (["job", "render", "jax-train", "--set", "job_name=a\n#SBATCH --x", "--", "x"], "job_name"),
    (["job", "render", "jax-train", "--set", "time=1h", "--", "x"], "Slurm time"),
    (["job", "render", "jax-train"], "needs a command"),
    (["job", "render", "array", "--", "x"], "--set sweep=VALUE"),
    (["job", "render", "container", "--set", "image=i", "--set", "env=1A=b", "--", "x"], "environment variable"),
    (["job", "render", "jax-train", "--set", "novalue", "--", "x"], "expected K=V"),
    (["job", "render", "jax-train", "--deployment", "/nonexistent", "--", "x"], "deployment.json"),
    (["job", "render", "jax-train", "--deployment", os.path.join(ROOT, "tests", "golden", "ct-a3mega"),
      "--nodeset", "a3mega", "--", "x"], "did you mean 'a3meganodeset'"),
])
def test_bad_input_exits_2_without_traceback(argv, expect, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err


def test_templates_listing(capsys):
    assert main(["job", "templates", "--json"]) == 0
    listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert set(listed) == {"array", "container", "jax-smoke", "jax-train", "maxtext"}
    assert {"preemptible", "checkpoint_hook"} <= {p["name"] for p in listed["array"]["params"]}
    assert main(["job", "templates"]) == 0
    assert "jax-train:" in capsys.readouterr().out


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_no_templates_is_an_error_naming_the_folder(as_json, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CTK_SBATCH_DIR", str(tmp_path))
    assert main(["job", "templates", *as_json]) == 2
    out = capsys.readouterr()
    if as_json:  # --json prints the error as JSON on stdout
        err = json.loads(out.out)["error"]
        assert (err["kind"], err["exit_code"], err["message"]) == ("usage", 2, f"no job templates in {tmp_path}")
    else:
        assert out.out == "" and out.err.startswith(f"error: no job templates in {tmp_path}\n  hint: ")


def test_smoke_example_is_embedded_verbatim():
    with open(os.path.join(paths.SBATCH, "examples", "jax_smoke.py")) as f:
        src = f.read()
    assert src in templates.render("jax-smoke", {}, [])


def test_shellcheck_flags_what_it_should():
    """The clean shellcheck runs above mean something: shellcheck (SYS_PKGS in the Makefile) is
    there and reports an unquoted expansion."""
    r = subprocess.run(["shellcheck", "-s", "bash", "-f", "gcc", "-"], input='rm -rf $1/tmp\n',
                       text=True, capture_output=True)
    assert r.returncode == 1
    assert r.stdout == "-:1:8: note: Double quote to prevent globbing and word splitting. [SC2086]\n"


def test_python_runs_the_stacks_interpreter_of_the_nodes(capsys):
    """With a deployment whose nodes carry a JAX stack, `python`/`python3` (or no command, for
    jax-smoke) becomes the stack's interpreter; any other command is left as given."""
    dep_dir = os.path.join(ROOT, "tests", "golden", "lab")
    cases = [("jax-smoke", [], "CTK_CMD=(/opt/ctk/jax/bin/python)"),
             ("jax-train", ["python", "-m", "x"], "CTK_CMD=(/opt/ctk/jax/bin/python -m x)"),
             ("jax-train", ["/usr/bin/python3", "t.py"], "CTK_CMD=(/usr/bin/python3 t.py)"),
             ("jax-train", ["bash", "run.sh"], "CTK_CMD=(bash run.sh)")]
    for name, cmd, want in cases:
        assert main(["job", "render", name, "--deployment", dep_dir, "--", *cmd] if cmd else
                    ["job", "render", name, "--deployment", dep_dir]) == 0
        assert want in capsys.readouterr().out.splitlines(), (name, cmd)
    # with no deployment nothing is known: python3 from PATH
    assert main(["job", "render", "jax-smoke"]) == 0
    assert "CTK_CMD=(python3)" in capsys.readouterr().out.splitlines()


# ---- hostile --set values -----------------------------------------------------------------

def _alias_bomb() -> str:
    """Nine anchors, each a list of nine aliases of the one before: 9**9 strings if expanded."""
    levels = ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        levels.append(f"&{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "[" + ", ".join(levels) + "]"


HOSTILE = {
    "alias-bomb": ("sweep", _alias_bomb(), "anchors, aliases and tags"),
    "nested-500": ("sweep", "[" * 500 + "]" * 500, "no nested lists"),
    "100kb-list": ("sweep", "x" * 100_000, "at most 64 KiB"),
    "100kb-int": ("nodes", "1" * 100_000, "at most 64 KiB"),
    "100kb-key": ("n" * 100_000, "1", "has no parameter"),
}


def _limit_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (200 * 2**20, 200 * 2**20))


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_set_value_exits_2_small_and_fast(case):
    """A real `python -m ctk` under a 200 MB address-space limit: the value is refused with
    exit 2, no traceback, and the message shows only its head and size."""
    key, value, expect = HOSTILE[case]
    template = "array" if key == "sweep" else "jax-train"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "toolkit"))
    r = subprocess.run([sys.executable, "-m", "ctk", "job", "render", template, f"--set={key}={value}", "--", "x"],
                       env=env, capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr
    assert expect in r.stderr
    size = len(value) if len(value) > 60 else len(key)
    assert f"... ({size} bytes)" in r.stderr
    assert len(r.stderr) < 1000, r.stderr[:2000]  # the value is never echoed whole
    assert "hint: " in r.stderr


@pytest.mark.parametrize("text,want", [
    ("[]", []),
    ("[a]", ["a"]),
    ("[a, b ,c,]", ["a", "b", "c"]),
    ("['--lr=0.1 --bs=32', \"--lr=0.2\"]", ["--lr=0.1 --bs=32", "--lr=0.2"]),
    ("['it''s', \"say \\\"hi\\\"\\t\\u00e9\"]", ["it's", 'say "hi"\t\u00e9']),
    ("[true, 1, null, 0x10, '*a', \"&b\", /a:/b:ro]", ["true", "1", "null", "0x10", "*a", "&b", "/a:/b:ro"]),
])
def test_list_values_are_strings_as_written(text, want):
    p = templates.load_template("array").params["sweep"]
    assert templates._coerce(p, text, "--set sweep:") == want


@pytest.mark.parametrize("text,why", [
    ("[a, *x]", "aliases"), ("[&x a]", "anchors"), ("[!!str a]", "tags"), ("[[a]]", "nested"),
    ("[{a: 1}]", "mappings"), ("[a", "no closing ]"), ("['a]", "not closed"), ('["a\\q"]', "unknown escape"),
    ("[a,,b]", "empty element"), ("[a] b", "after the closing ]"), ("['a' 'b']", "expected , or ]"),
    ("[a{b]", "quote the element"),
])
def test_list_values_refused(text, why):
    p = templates.load_template("array").params["sweep"]
    with pytest.raises(UserError, match=why):
        templates._coerce(p, text, "--set sweep:")


# ---- bounds ---------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value,expect", [
    ("megascale_port", "65536", "<= 65535"),
    ("coordinator_port", "70000", "<= 65535"),
    ("mem_fraction", "1.01", "<= 1"),
    ("nodes", "0", ">= 1"),
    ("time", "99999999", "at most 365 days"),
    ("time", "366-00", "at most 365 days"),
    ("time", "0", "Slurm reads 0 as no limit"),
    ("time", "1234567890", "Slurm time"),
])
def test_values_out_of_bounds_are_refused(key, value, expect, capsys):
    assert main(["job", "render", "jax-train", f"--set={key}={value}", "--", "x"]) == 2
    err = capsys.readouterr().err
    assert expect in err and f"--set {key}={value}:" in err and "hint: " in err and "Traceback" not in err


@pytest.mark.parametrize("key,value", [("megascale_port", "65535"), ("mem_fraction", "1"), ("time", "365-00:00:00"),
                                       ("time", "525600"), ("time", "UNLIMITED")])
def test_values_at_the_bounds_render(key, value, capsys):
    assert main(["job", "render", "jax-train", f"--set={key}={value}", "--", "x"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("name", ["jax-train", "jax-smoke", "array", "container"])
def test_empty_time_leaves_the_line_out(name):
    script = templates.render(name, dict(NEEDS.get(name, {}), time=""), ["x"])
    assert not [ln for ln in header(script) if ln.startswith("#SBATCH --time")]
    assert "#SBATCH --time=" in templates.render(name, dict(NEEDS.get(name, {}), time="5"), ["x"])


def test_bounds_are_listed():
    params = {p["name"]: p for p in templates.load_template("jax-train").to_dict()["params"]}
    assert (params["megascale_port"]["min"], params["megascale_port"]["max"]) == (1, 65535)
    assert params["coordinator_port"]["max"] == 65535 and params["mem_fraction"]["max"] == 1
    from ctk.jobs.commands import templates_text

    assert "  megascale_port (int, default 8081, min 1, max 65535): " in templates_text(False)


@pytest.mark.parametrize("field,msg", [("min: 2, max: 1", "above max"), ("max: x", "must be a number"),
                                       ("max: 3, pattern: name", "int and float parameters only")])
def test_bad_bounds_in_a_template_are_refused(field, msg, tmp_path, monkeypatch):
    for f in os.listdir(paths.SBATCH):
        if f.endswith(".j2"):
            with open(os.path.join(paths.SBATCH, f)) as src, open(tmp_path / f, "w") as dst:
                dst.write(src.read())
    typ = "str" if "pattern" in field else "int"
    (tmp_path / "t.sbatch.j2").write_text(f"{{#- ctk-params:\n- {{name: n, type: {typ}, default: 1, {field}}}\n-#}}\necho\n")
    monkeypatch.setenv("CTK_SBATCH_DIR", str(tmp_path))
    with pytest.raises(UserError, match=msg):
        templates.load_template("t")


def _with_containers(name: str = "lab") -> Deployment:
    """The lab's deployment with a container image jax-cpu (ctk/container-image)."""
    from ctk.model import CONTAINER_IMAGE, ImageSpec

    dep = _dep(name)
    dep.containers = [ImageSpec(name="jax-cpu", module_id="jax_container", roles=["common", "jax"],
                                source=CONTAINER_IMAGE)]
    return dep


def test_container_on_a_lab_runs_slurms_own_containers_from_its_image():
    s = templates.render("container", {"image": "jax-cpu", "workdir": "/home/researcher/run"}, CMD, _with_containers())
    assert "--container=/var/lib/ctk/containers/jax-cpu --chdir=/home/researcher/run" in s
    assert "--container-image" not in s and "ctk: container runtime oci" in s
    r = subprocess.run(["bash", "-n"], input=s, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr
    # the lab's nodes have Slurm's containers, yet a pyxis cluster elsewhere is one flag away
    s = templates.render("container", {"image": "nvcr.io#nvidia/jax:25.04-py3", "runtime": "pyxis"}, CMD,
                         _with_containers())
    assert "--container-image='nvcr.io#nvidia/jax:25.04-py3'" in s and "ctk: container runtime pyxis" in s


def test_container_without_a_deployment_takes_the_runtime_from_the_images_form():
    assert "--container=/srv/bundles/jax" in templates.render("container", {"image": "/srv/bundles/jax"}, CMD)
    assert "--container=/var/lib/ctk/containers/jax-cpu" in templates.render("container", {"image": "jax-cpu"}, CMD)
    for pyxis in ("nvcr.io#nvidia/jax:25.04-py3", "/images/jax.sqsh", "docker://ghcr.io/nvidia/jax:jax"):
        assert "--container-image=" in templates.render("container", {"image": pyxis}, CMD), pyxis


@pytest.mark.parametrize("params,message", [
    ({"image": "nope"}, "the deployment has no container image of that name"),
    ({"image": "nvcr.io#nvidia/jax:25.04-py3"}, "an image for pyxis/enroot"),
    ({"image": "jax-cpu", "mounts": ["/data:/data"]}, "mounts are pyxis's"),
    ({"image": "jax-cpu", "workdir": "/tmp/run"}, "must be under /home (the container's /tmp is its own)"),
    ({"image": "jax-cpu", "container_runtime": "docker"}, "one of , oci, pyxis"),
    ({"image": "jax/cpu"}, "not a container image name nor an absolute bundle folder"),
    ({"image": "jax-cpu", "runtime": "docker"}, "one of auto, oci, pyxis"),
])
def test_container_mistakes_on_a_lab_are_refused_with_what_to_do(params, message):
    with pytest.raises(UserError) as e:
        templates.render("container", params, CMD, _with_containers())
    said = f"{e.value} {getattr(e.value, 'hint', '')}"
    assert message in said, said
    if params["image"] == "nope":
        assert "jax-cpu" in said  # the images it has


def test_container_on_a_lab_without_container_images_says_how_to_add_one():
    with pytest.raises(UserError) as e:
        templates.render("container", {"image": "jax-cpu"}, CMD, _dep("lab"))
    assert "add a ctk/container-image module" in f"{e.value} {getattr(e.value, 'hint', '')}"


def test_a_cache_folder_removed_between_renders_costs_only_a_compile(tmp_path, monkeypatch):
    """The compiled-template cache is a convenience: its folder gone (a cleaned ~/.cache) or not a
    folder at all, rendering goes on."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = templates.render("jax-smoke", {}, ["python3", "-V"])
    assert os.listdir(tmp_path / "cache" / "ctk" / "jinja")
    shutil.rmtree(tmp_path / "cache")
    # templates not compiled yet in this process: each compile writes to the cache
    assert templates.render("jax-train", {"nodes": 2}, ["python3", "train.py"])
    shutil.rmtree(tmp_path / "cache" / "ctk" / "jinja")
    (tmp_path / "cache" / "ctk" / "jinja").write_text("not a folder")
    assert templates.render("maxtext", {}, ["base_emb_dim=256"])
    assert templates.render("jax-smoke", {}, ["python3", "-V"]) == first
