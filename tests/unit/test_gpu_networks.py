"""GPU networks on Google Cloud: each GPU nodeset of ctk's kinds gets the networks its machine
needs, wired as Cluster Toolkit's A3 Mega and A3 Ultra examples wire them (compared here with
those blueprints in ../shared/fixtures), and the jobs rendered for the deployment use them."""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import FIXTURES, ROOT
from ctk.cli import main
from ctk.modules import gpu_networks as gn

ML = os.path.join(FIXTURES, "examples", "machine-learning")
A3MEGA = os.path.join(ML, "a3-megagpu-8g", "a3mega-slurm-blueprint.yaml")
A3ULTRA = os.path.join(ML, "a3-ultragpu-8g", "a3ultra-slurm-blueprint.yaml")
GCP_JAX = os.path.join(ROOT, "blueprints", "gcp-jax.yaml")
GCP_A3ULTRA = os.path.join(ROOT, "blueprints", "gcp-a3ultra.yaml")


def modules(bp: dict) -> dict[str, dict]:
    return {m["id"]: m for g in bp["deployment_groups"] for m in g["modules"]}


def by_source(bp: dict, source: str) -> list[dict]:
    return [m for m in modules(bp).values() if m["source"] == source]


def with_vars(value, vars_: dict):
    """VALUE with each $(vars.X) of the fixture's own vars replaced by its value there (repeatedly:
    base_network_name is $(vars.deployment_name))."""
    if isinstance(value, dict):
        return {k: with_vars(v, vars_) for k, v in value.items()}
    if isinstance(value, list):
        return [with_vars(v, vars_) for v in value]
    if not isinstance(value, str):
        return value
    for _ in range(3):
        whole = re.fullmatch(r"\$\(vars\.(\w+)\)", value)
        if whole and vars_.get(whole.group(1)) is not None and not isinstance(vars_[whole.group(1)], str):
            return vars_[whole.group(1)]
        value = re.sub(r"\$\(vars\.(\w+)\)", lambda m: str(vars_[m.group(1)]) if isinstance(
            vars_.get(m.group(1)), (str, int)) and m.group(1) in vars_ else m.group(0), value)
    return value


def fixture(path) -> tuple[dict, dict]:
    bp = yaml.safe_load(open(path))
    return bp, bp.get("vars") or {}


def handoff(tmp_path, bp_path, *args) -> dict:
    out = tmp_path / "dep"
    assert main(["create", bp_path, "-o", str(out), "-w", "--vars", "project_id=demo", *args]) == 0
    return yaml.safe_load((out / "gcp" / "blueprint.yaml").read_text())


def variant(tmp_path, path, *subs, name="bp.yaml") -> str:
    text = open(path).read()
    for old, new in subs:
        assert old in text, old
        text = text.replace(old, new, 1)
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def validate(path, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["validate", path, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def line_of(path, needle) -> int:
    return next(i for i, ln in enumerate(open(path).read().splitlines(), 1) if needle in ln)


# ---- against Cluster Toolkit's examples --------------------------------------------------------

@pytest.mark.ct_fixtures
def test_an_a3mega_nodeset_gets_the_a3mega_examples_eight_gpu_networks_and_rxdm(tmp_path, capsys):
    ct, ct_vars = fixture(A3MEGA)
    [ct_multivpc] = by_source(ct, gn.MULTIVPC)
    ct_nodeset = modules(ct)["a3mega_nodeset"]
    assert ct_multivpc["id"] in ct_nodeset["use"]

    bp = handoff(tmp_path, GCP_JAX)
    [multivpc] = by_source(bp, gn.MULTIVPC)
    assert multivpc["settings"] == with_vars(ct_multivpc["settings"], ct_vars)  # 8 networks, 10.0.0.0/9, /20
    assert multivpc["settings"]["network_count"] == 8
    nodeset = modules(bp)["a3mega_nodeset"]
    assert nodeset["use"] == ["network", multivpc["id"]]  # its additional_networks, as the example's
    assert nodeset["settings"]["bandwidth_tier"] == ct_nodeset["settings"]["bandwidth_tier"]
    assert modules(bp)["cpu_nodeset"]["use"] == ["network"]  # the CPU nodes get none
    # the primary network: the example's MTU, on its range clear of the GPU networks' 10.0.0.0/9
    ct_sys = modules(ct)["sysnet"]["settings"]
    net = modules(bp)["network"]["settings"]
    assert net["mtu"] == ct_sys["mtu"] == 8244
    assert net["network_address_range"] == with_vars(ct_sys["network_address_range"], ct_vars)

    # RxDM as the a3mega partition's prolog and epilog, staged by the controller's startup script
    ct_stage = modules(ct)["controller_startup"]["settings"]["runners"][0]["content"]
    ct_ctl = modules(ct)["slurm_controller"]["settings"]
    ctl = modules(bp)["controller"]["settings"]
    for key in ("enable_external_prolog_epilog", "slurm_conf_tpl"):
        assert ctl[key] == ct_ctl[key], key
    assert ctl["controller_startup_script"] == "$(ctk_controller_startup.startup_script)"
    [runner] = modules(bp)["ctk_controller_startup"]["settings"]["runners"]
    # the example's script, from one commit of slurm-gcp rather than its master branch
    master = "https://raw.githubusercontent.com/GoogleCloudPlatform/slurm-gcp/master/"
    assert master + gn.PROLOG_PATH + "receive-data-path-manager-mega" in ct_stage
    assert gn.PROLOG_URL.replace(gn.SLURM_GCP_COMMIT, "master") == master + gn.PROLOG_PATH
    assert f'"{gn.PROLOG_URL}$1"' in runner["content"]
    assert "\nfetch receive-data-path-manager-mega " + gn.PROLOG_SHA256["receive-data-path-manager-mega"] \
        in runner["content"]
    assert "rxdm.prolog_slurmd" in ct_stage and "rxdm.epilog_slurmd" in ct_stage
    assert "link a3mega receive-data-path-manager-mega rxdm rxdm" in runner["content"]
    assert gn.SLURM_ADM in ct_stage and f"adm={gn.SLURM_ADM}" in runner["content"]
    assert "partition-$1-prolog_slurmd.d/$3.prolog_slurmd" in runner["content"]  # as the example's folders
    rc, out = validate(str(tmp_path / "dep" / "gcp" / "blueprint.yaml"), capsys)
    assert rc == 0, out


@pytest.mark.ct_fixtures
def test_an_a3ultra_nodeset_gets_the_a3ultra_examples_rdma_networks(tmp_path, capsys):
    ct, ct_vars = fixture(A3ULTRA)
    ct_mods = modules(ct)
    [ct_rdma] = by_source(ct, gn.RDMA_VPC)
    ct_net1 = ct_mods["a3ultra-slurm-net-1"]
    ct_nodeset = ct_mods["a3_ultra_nodeset"]

    bp = handoff(tmp_path, GCP_A3ULTRA)
    mods = modules(bp)
    [rdma] = by_source(bp, gn.RDMA_VPC)
    assert rdma["settings"] == with_vars(ct_rdma["settings"], ct_vars)  # the RoCE profile, 8 subnetworks
    assert rdma["settings"]["subnetworks_template"]["count"] == 8
    net1 = mods["ctk_gpu_net1"]
    assert net1["settings"] == with_vars(ct_net1["settings"], ct_vars)  # MTU 8896, its subnetwork and firewall
    assert mods["network"]["settings"]["mtu"] == ct_mods["a3ultra-slurm-net-0"]["settings"]["mtu"] == 8896

    nodeset = mods["a3u_nodeset"]["settings"]
    # the same NICs: the second gVNIC network's, then the RDMA subnetworks' interfaces
    def normal(expr, ids):
        text = re.sub(r"\s+", "", expr)
        for old, new in ids:
            text = text.replace(old, new)
        return text
    assert normal(nodeset["additional_networks"], [("ctk_gpu_net1", "NET1"), ("ctk_gpu_rdma", "RDMA")]) == normal(
        ct_nodeset["settings"]["additional_networks"], [("a3ultra-slurm-net-1", "NET1"), ("a3ultra-slurm-rdma-net", "RDMA")])
    for key in ("bandwidth_tier", "disk_type", "enable_placement"):
        assert nodeset[key] == ct_nodeset["settings"][key], key
    assert nodeset["reservation_name"] == "a3u-reservation"
    # the gIB plugin at the version the example installs, by the nodes' startup script
    assert ct_vars["nccl_gib_version"] == gn.NCCL_GIB_VERSION
    assert nodeset["startup_script"] == "$(ctk_rdma_startup.startup_script)"
    [runner] = mods["ctk_rdma_startup"]["settings"]["runners"]
    assert f"want={gn.NCCL_GIB_VERSION}" in runner["content"] and "gpudirect-gib-apt" in runner["content"]
    assert "ctk_controller_startup" not in mods and "slurm_conf_tpl" not in mods["controller"]["settings"]  # no RxDM
    rc, out = validate(str(tmp_path / "dep" / "gcp" / "blueprint.yaml"), capsys)
    assert rc == 0, out


@pytest.mark.ct_fixtures
def test_the_table_holds_what_the_examples_give_their_machines():
    ct, ct_vars = fixture(A3MEGA)
    [mv] = by_source(ct, gn.MULTIVPC)
    mega = gn.of_machine("a3-megagpu-8g")
    assert mega.transport == "gpudirect-tcpxo" and mega.gpu_nics == mv["settings"]["network_count"]
    assert gn.GPUNETS_RANGE == mv["settings"]["global_ip_address_range"]
    assert gn.GPUNETS_CIDR_SUFFIX == mv["settings"]["subnetwork_cidr_suffix"]
    assert gn.PRIMARY_RANGE_WITH_GPUNETS == ct_vars["sys_net_range"]
    assert gn.LONG_PROLOG_TPL == modules(ct)["slurm_controller"]["settings"]["slurm_conf_tpl"]
    ct, ct_vars = fixture(A3ULTRA)
    ultra = gn.of_machine("a3-ultragpu-8g")
    assert ultra.transport == "rdma" and ultra.second_nic_range == ct_vars["net1_range"]
    assert gn.RDMA_RANGE == ct_vars["rdma_net_range"]
    assert ultra.gpu_nics == by_source(ct, gn.RDMA_VPC)[0]["settings"]["subnetworks_template"]["count"]
    assert ultra.primary_mtu == modules(ct)["a3ultra-slurm-net-0"]["settings"]["mtu"]


def test_every_gpu_network_machine_is_built_or_said_not_to_be():
    from ctk.modules.machines import known_machine_types, lookup_machine

    networked = {n for n in known_machine_types() if (m := lookup_machine(n)) and m.network != "tcp"}
    assert networked == set(gn.BY_MACHINE) | set(gn.NOT_WIRED)
    for name, g in gn.BY_MACHINE.items():
        assert lookup_machine(name).network == g.transport, name


# ---- the jobs ----------------------------------------------------------------------------------

def render(deployment, capsys, *args) -> str:
    capsys.readouterr()
    assert main(["job", "render", "jax-train", "--deployment", str(deployment), "--nodes", "2", *args,
                 "--", "python", "train.py"]) == 0
    return capsys.readouterr().out


def test_the_jobs_of_each_cluster_use_the_network_its_hand_off_built(tmp_path, capsys):
    for bp, nodeset, network, wants in (
            (GCP_JAX, "a3meganodeset", "gpudirect-tcpxo (nodeset a3meganodeset, a3-megagpu-8g)",
             "export NCCL_FASTRAK_IFNAME="),
            (GCP_A3ULTRA, "a3unodeset", "rdma (nodeset a3unodeset, a3-ultragpu-8g)",
             ". /usr/local/gib/scripts/set_nccl_env.sh")):
        out = tmp_path / os.path.basename(bp)
        assert main(["create", bp, "-o", str(out)]) == 0
        script = render(out, capsys, "--nodeset", nodeset)
        assert wants in script and "NCCL_NET=Socket" not in script
        # --check says which network, from where; sbatch --test-only itself needs the login node
        capsys.readouterr()
        assert main(["job", "render", "jax-train", "--deployment", str(out), "--nodeset", nodeset, "--check",
                     "--", "python", "train.py"]) == 2
        err = capsys.readouterr().err
        assert f"network: {network}: the Google Cloud hand-off gives it" in err
        assert "(gcp/blueprint.yaml)" in err
        assert "--check --deployment" in err and "--host LOGIN_NODE" in err


def test_gpu_network_tcp_opts_out_and_the_jobs_know(tmp_path, capsys):
    bp = variant(tmp_path, GCP_A3ULTRA, ("      enable_placement: false\n",
                                         "      enable_placement: false\n      gpu_network: tcp\n"))
    out = tmp_path / "dep"
    assert main(["create", bp, "-o", str(out), "--vars", "project_id=demo"]) == 0
    text = (out / "gcp" / "blueprint.yaml").read_text()
    assert gn.RDMA_VPC not in text and "additional_networks" not in text and "mtu" not in text
    assert "The GPU networks" not in (out / "gcp" / "README.md").read_text()
    script = render(out, capsys)
    assert "export NCCL_NET=Socket" in script and "gib" not in script
    capsys.readouterr()
    main(["job", "render", "jax-train", "--deployment", str(out), "--check", "--", "python", "train.py"])
    assert "network: tcp (nodeset a3unodeset, a3-ultragpu-8g): the Google Cloud hand-off gives it no GPU network" \
        in capsys.readouterr().err


# ---- what is refused, and what is said -----------------------------------------------------------

def test_a_gpu_network_the_machine_lacks_is_refused_at_its_line(tmp_path, capsys):
    for given, says in (("gpudirect-tcpxo", "a3-ultragpu-8g has no gpudirect-tcpxo network: its GPUs talk over rdma"),
                        ("rmda", "gpu_network 'rmda' is not a GPU network")):
        bp = variant(tmp_path, GCP_A3ULTRA, ("      enable_placement: false\n",
                                             f"      enable_placement: false\n      gpu_network: {given}\n"))
        rc, out = validate(bp, capsys)
        assert rc == 2
        [err] = out["errors"]
        assert says in err["message"] and err["line"] == line_of(bp, "gpu_network:")
    assert "did you mean 'rdma'" in err["hint"]


def test_rdma_nodes_need_an_apt_image(tmp_path, capsys):
    bp = variant(tmp_path, GCP_A3ULTRA, ("name: jax-cuda\n      base: ubuntu-24.04", "name: jax-cuda\n      base: rocky-9"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    [err] = [e for e in out["errors"] if "gIB" in e["message"]]
    assert "image 'jax-cuda' is on rocky-9" in err["message"] and "ubuntu-24.04" in err["hint"]


def test_a_partition_of_tcpx_and_tcpxo_nodesets_is_refused(tmp_path, capsys):
    bp = variant(tmp_path, GCP_JAX,
                 ("  - id: a3mega_partition\n", "  - id: a3high_nodeset\n    source: ctk/slurm/nodeset\n"
                  "    use: [gpu_image]\n    settings:\n      machine_type: a3-highgpu-8g\n"
                  "      node_count_dynamic_max: 1\n\n  - id: a3mega_partition\n"),
                 ("use: [a3mega_nodeset]", "use: [a3mega_nodeset, a3high_nodeset]"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    [err] = out["errors"]
    assert "partition a3mega: nodesets a3highnodeset and a3meganodeset need different receive-datapath" in err["message"]


def test_tcpx_and_rdma_nodesets_in_one_deployment_each_get_theirs(tmp_path):
    """Networks are added once per kind: A3 High and A3 Mega nodesets beside the A3 Ultra get a
    multivpc of 4 and one of 8, the A3 Ultra its RDMA networks; the primary network takes the
    smaller MTU; a nodeset that opts out gets none."""
    extra = "".join(f"  - id: {mid}\n    source: ctk/slurm/nodeset\n    use: [gpu_image]\n    settings:\n"
                    f"      machine_type: {mt}\n      node_count_dynamic_max: 1\n{more}\n"
                    for mid, mt, more in (("a3high_nodeset", "a3-highgpu-8g", ""), ("a3mega_nodeset", "a3-megagpu-8g", ""),
                                          ("a4_nodeset", "a4-highgpu-8g", "      gpu_network: tcp\n")))
    out = handoff(tmp_path, variant(tmp_path, GCP_A3ULTRA, ("  - id: a3u_partition\n", extra + "  - id: a3u_partition\n")))
    mods = modules(out)
    counts = {m["id"]: m["settings"]["network_count"] for m in by_source(out, gn.MULTIVPC)}
    assert counts == {"ctk_gpunets_4": 4, "ctk_gpunets_8": 8}
    assert mods["a3high_nodeset"]["use"] == ["network", "ctk_gpunets_4"]
    assert mods["a3mega_nodeset"]["use"] == ["network", "ctk_gpunets_8"]
    assert len({m["settings"]["network_name_prefix"] for m in by_source(out, gn.MULTIVPC)}) == 2
    assert [m["id"] for m in by_source(out, gn.RDMA_VPC)] == ["ctk_gpu_rdma"]
    assert "ctk_gpu_rdma.subnetwork_interfaces" in mods["a3u_nodeset"]["settings"]["additional_networks"]
    assert "additional_networks" not in mods["a4_nodeset"]["settings"] and mods["a4_nodeset"]["use"] == ["network"]
    assert mods["network"]["settings"] == {"mtu": 8244, "network_address_range": gn.PRIMARY_RANGE_WITH_GPUNETS}
    # in no partition, the A3s get no RxDM, and the README says so
    assert "ctk_controller_startup" not in mods
    readme = (tmp_path / "dep" / "gcp" / "README.md").read_text()
    assert "(a3-megagpu-8g): gpudirect-tcpxo: 8 GPU networks (multivpc 'ctk_gpunets_8'), and no RxDM" in readme


def test_arm_machines_are_refused_on_the_x86_images(tmp_path, capsys):
    """A4X (Grace, and Blackwell) gets the Arm refusal alone, not a driver hint for x86 families too."""
    bp = variant(tmp_path, GCP_A3ULTRA, ("machine_type: a3-ultragpu-8g", "machine_type: a4x-highgpu-4g"),
                 ("machine_type: n2-standard-8", "machine_type: c4a-standard-8"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    got = {e["line"]: e["message"] for e in out["errors"]}
    assert got == {line_of(bp, "machine_type: a4x-highgpu-4g"): "module 'a3u_nodeset': a4x-highgpu-4g has Arm CPUs, "
                   "and the images ctk builds on slurm-gcp's families are x86-64",
                   line_of(bp, "machine_type: c4a-standard-8"): "module 'login': c4a-standard-8 has Arm CPUs, and the "
                   "images ctk builds on slurm-gcp's families are x86-64"}


def test_the_startup_runners_are_sound_shell(tmp_path):
    """The runners ctk writes pass bash -n and shellcheck, and hold no $( that gcluster would read
    as an expression of its own."""
    scripts = []
    for bp in (GCP_JAX, GCP_A3ULTRA):
        out = handoff(tmp_path, bp)
        for mid in ("ctk_controller_startup", "ctk_rdma_startup"):
            if mid in modules(out):
                scripts += [r["content"] for r in modules(out)[mid]["settings"]["runners"]]
    assert len(scripts) == 2
    for i, text in enumerate(scripts):
        assert "$(" not in text
        path = tmp_path / f"runner{i}.sh"
        path.write_text(text)
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
        r = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout


# ---- placement -----------------------------------------------------------------------------------

def test_placement_and_reservations_take_cluster_toolkits_checks_at_their_lines(tmp_path, capsys):
    bp = variant(tmp_path, GCP_A3ULTRA,
                 ("a3u_reservation: a3u-reservation", "a3u_reservation: A3U_Res"),
                 ("      enable_placement: false\n",
                  "      enable_placement: false\n      placement_max_distance: 1\n      dws_flex: {enabled: true}\n"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    got = {e["message"].split(": ", 1)[1]: e["line"] for e in out["errors"]}
    assert got == {
        "reservation_name 'A3U_Res' is not a reservation's name or path": line_of(bp, "reservation_name:"),
        "placement_max_distance needs a compact placement, and enable_placement is false":
            line_of(bp, "enable_placement:"),
        "A3 machines (a3-ultragpu-8g) cannot be placed at distance 1": line_of(bp, "placement_max_distance:"),
        "flex-start (dws_flex) cannot draw on a reservation": line_of(bp, "dws_flex:"),
    }


def test_placement_goes_to_the_nodeset_as_written_and_the_default_is_cluster_toolkits(tmp_path):
    out = handoff(tmp_path, variant(tmp_path, GCP_A3ULTRA, ("      enable_placement: false\n",
                                                            "      placement_max_distance: 2\n")))
    s = modules(out)["a3u_nodeset"]["settings"]
    assert s["placement_max_distance"] == 2 and "enable_placement" not in s  # Cluster Toolkit's default: true
    out = handoff(tmp_path, GCP_JAX)
    assert not {"enable_placement", "reservation_name", "placement_max_distance"} & set(
        modules(out)["a3mega_nodeset"]["settings"])


# ---- Cluster Toolkit's own nodesets -------------------------------------------------------------

@pytest.mark.ct_fixtures
def test_a_cluster_toolkit_gpu_nodeset_without_its_networks_is_said_and_its_jobs_use_tcp(tmp_path, capsys):
    bp = variant(tmp_path, A3MEGA, ("    use:\n    - sysnet\n    - gpunets\n", "    use:\n    - sysnet\n"))
    args = ["--vars", "project_id=p,deployment_name=demo,disk_size_gb=100,a3mega_cluster_size=2,region=us-central1,"
            "zone=us-central1-a,network_name_system=n,subnetwork_name_system=s,slurm_cluster_name=demo,"
            "a3mega_reservation_name=res",
            "-d", os.path.join(ML, "a3-megagpu-8g", "a3mega-slurm-deployment.yaml")]
    capsys.readouterr()
    assert main(["validate", bp, "--json", *args]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    [w] = [w for w in warnings if "GPU network" in w["message"]]
    assert "a3-megagpu-8g's GPU network (gpudirect-tcpxo) is not wired" in w["message"]
    assert f"a {gn.MULTIVPC} of 8 networks" in w["hint"]
    assert w["line"] == line_of(bp, "machine_type: a3-megagpu-8g")
    out = tmp_path / "dep"
    assert main(["create", bp, "-o", str(out), *args]) == 0
    nets = {n["name"]: n["network"] for n in json.loads((out / "deployment.json").read_text())["nodesets"]}
    assert nets["a3meganodeset"] == "tcp"
    # as written, with the networks: the jobs' network is the machine's
    out = tmp_path / "dep2"
    assert main(["create", A3MEGA, "-o", str(out), *args]) == 0
    nets = {n["name"]: n["network"] for n in json.loads((out / "deployment.json").read_text())["nodesets"]}
    assert nets["a3meganodeset"] == "gpudirect-tcpxo"


def test_the_controllers_runner_stages_rxdm_behind_its_check_and_a_wrong_file_is_not_run(tmp_path):
    """The controller's runner, run for real (its folder moved under tmp_path, a stand-in curl on
    PATH): the checked script is linked as the partition's prolog and epilog through ctk's
    wrapper, which runs it where the node has what it needs and skips it (exit 0) where not; a
    fetched file whose SHA-256 differs is never installed."""
    import hashlib

    out = handoff(tmp_path, GCP_JAX)
    [runner] = modules(out)["ctk_controller_startup"]["settings"]["runners"]
    adm, bin_ = tmp_path / "adm", tmp_path / "bin"
    bin_.mkdir()
    served = tmp_path / "served"
    served.write_text('#!/bin/bash\necho "rxdm $SLURM_SCRIPT_CONTEXT" >> "$CTK_TEST_OUT"\n')
    real_sha = gn.PROLOG_SHA256["receive-data-path-manager-mega"]
    aperture = tmp_path / "aperture_devices"
    text = runner["content"].replace(gn.SLURM_ADM, str(adm)).replace("/dev/aperture_devices", str(aperture))
    (bin_ / "curl").write_text(f'#!/bin/bash\nwhile [ "$1" != "-o" ]; do shift; done\ncp {served} "$2"\n')
    (bin_ / "logger").write_text('#!/bin/bash\necho "logger $*" >> "$CTK_TEST_OUT"\n')
    for tool in ("curl", "logger"):
        (bin_ / tool).chmod(0o755)
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "CTK_TEST_OUT": str(tmp_path / "out")}

    def stage(sha):
        shutil.rmtree(adm, ignore_errors=True)
        script = tmp_path / "runner.sh"
        script.write_text(text.replace(real_sha, sha))
        r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stderr

    def prolog(**more):
        (tmp_path / "out").unlink(missing_ok=True)
        link = adm / "partition-a3mega-prolog_slurmd.d" / "rxdm.prolog_slurmd"
        r = subprocess.run([str(link)], env={**env, "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "7",
                                             **more}, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return (tmp_path / "out").read_text()

    stage(hashlib.sha256(served.read_bytes()).hexdigest())
    for d, name in (("prolog", "rxdm.prolog_slurmd"), ("epilog", "rxdm.epilog_slurmd")):
        link = adm / f"partition-a3mega-{d}_slurmd.d" / name
        assert os.readlink(link) == str(adm / "scripts" / "ctk-receive-data-path-manager-mega")
    # a node with Docker, NVIDIA's container toolkit, the dmabuf-import-helper module and the
    # aperture devices: slurm-gcp's script runs
    aperture.mkdir()
    for tool in ("docker", "nvidia-container-cli", "modinfo"):
        (bin_ / tool).write_text("#!/bin/bash\nexit 0\n")
        (bin_ / tool).chmod(0o755)
    assert prolog() == "rxdm prolog_slurmd\n"
    # without the module: skipped, and the node's log says why
    (bin_ / "modinfo").write_text("#!/bin/bash\nexit 1\n")
    assert prolog() == "logger -t ctk-rxdm job 7: RxDM skipped, this node lacks the dmabuf-import-helper kernel module\n"
    (bin_ / "nvidia-container-cli").unlink()
    aperture.rmdir()
    assert prolog() == ("logger -t ctk-rxdm job 7: RxDM skipped, this node lacks NVIDIA's container toolkit "
                        "(nvidia-container-cli), the dmabuf-import-helper kernel module, the NICs' aperture devices "
                        f"({aperture}, a udev rule)\n")
    # a file that is not the one expected: not installed, said, and the wrapper skips
    (bin_ / "modinfo").write_text("#!/bin/bash\nexit 0\n")
    err = stage(real_sha)
    assert "could not fetch slurm-gcp's receive-data-path-manager-mega" in err
    assert not (adm / "scripts" / "receive-data-path-manager-mega").exists()
    assert "lacks slurm-gcp's receive-data-path-manager-mega (not fetched)" in prolog()


def test_a_module_id_the_hand_off_takes_is_refused_at_its_line(tmp_path, capsys):
    bp = variant(tmp_path, GCP_JAX, ("  - id: a3mega_nodeset\n", "  - id: ctk_gpunets\n"),
                 ("use: [a3mega_nodeset]", "use: [ctk_gpunets]"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    [err] = out["errors"]
    assert err["message"] == "module id 'ctk_gpunets' is one the Google Cloud hand-off gives a module of its own"
    assert err["line"] == line_of(bp, "- id: ctk_gpunets")
    # and the hand-off's others: the vpc, each image's startup script and Packer build
    for taken in ("network", "jax_cuda_script", "jax_cpu_build"):
        bp = variant(tmp_path, GCP_JAX, ("  - id: a3mega_nodeset\n", f"  - id: {taken}\n"),
                     ("use: [a3mega_nodeset]", f"use: [{taken}]"), name=f"{taken}.yaml")
        rc, out = validate(bp, capsys)
        assert rc == 2 and [e["line"] for e in out["errors"]] == [line_of(bp, f"- id: {taken}")], out


def test_a3_edge_is_said_not_built_and_its_jobs_use_the_primary_network(tmp_path, capsys):
    bp = variant(tmp_path, GCP_JAX, ("machine_type: a3-megagpu-8g", "machine_type: a3-edgegpu-8g"))
    rc, out = validate(bp, capsys)
    assert rc == 0, out
    [w] = out["warnings"]
    assert "ctk does not build a3-edgegpu-8g's gpudirect-tcpx network (slurm-gcp's receive-datapath manager runs " \
        "on a3-highgpu-8g only)" in w["message"]
    assert w["line"] == line_of(bp, "machine_type: a3-edgegpu-8g") and "gpu_network: tcp" in w["hint"]
    dep = tmp_path / "dep"
    assert main(["create", bp, "-o", str(dep), "--vars", "project_id=demo"]) == 0
    nets = {n["name"]: n["network"] for n in json.loads((dep / "deployment.json").read_text())["nodesets"]}
    assert nets["a3meganodeset"] == "tcp"
    assert gn.MULTIVPC not in (dep / "gcp" / "blueprint.yaml").read_text()
    asked = variant(tmp_path, bp, ("machine_type: a3-edgegpu-8g\n",
                                   "machine_type: a3-edgegpu-8g\n      gpu_network: gpudirect-tcpx\n"), name="asked.yaml")
    rc, out = validate(asked, capsys)
    assert rc == 2 and out["errors"][0]["line"] == line_of(asked, "gpu_network: gpudirect-tcpx")
    assert "gpu_network: tcp" in out["errors"][0]["hint"]


def test_blackwell_on_a_slurm_gcp_family_below_570_is_refused_at_its_line(tmp_path, capsys):
    for machine in ("g4-standard-48", "a4-highgpu-8g"):
        bp = variant(tmp_path, GCP_JAX, ("machine_type: a3-megagpu-8g", f"machine_type: {machine}"))
        rc, out = validate(bp, capsys)
        assert rc == 2, machine
        [err] = [e for e in out["errors"] if "Blackwell" in e["message"]]
        assert "need NVIDIA driver 570 or later" in err["message"] and "with driver 550.90.12" in err["message"]
        assert err["line"] == line_of(bp, f"machine_type: {machine}") and "ubuntu-24.04" in err["hint"]
    bp = variant(tmp_path, GCP_JAX, ("machine_type: a3-megagpu-8g", "machine_type: a4x-maxgpu-4g-metal"))
    rc, out = validate(bp, capsys)  # Arm: refused as that alone, no x86 family is the answer
    assert rc == 2 and [e["message"].split(": ", 1)[1] for e in out["errors"]] == [
        "a4x-maxgpu-4g-metal has Arm CPUs, and the images ctk builds on slurm-gcp's families are x86-64"]
    rc, out = validate(GCP_A3ULTRA, capsys)  # ubuntu-24.04's family: driver 570
    assert rc == 0, out


def test_gpu_network_on_a_machine_without_gpus(tmp_path, capsys):
    bp = variant(tmp_path, GCP_JAX, ("machine_type: c2-standard-8\n", "machine_type: c2-standard-8\n      gpu_network: rdma\n"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    [err] = out["errors"]
    assert err["message"] == "c2-standard-8 has no rdma network: its nodes have no GPU network"


def test_show_names_each_gpu_nodesets_network(capsys):
    for bp, rows in ((GCP_JAX, {"a3meganodeset": "gpudirect-tcpxo", "cpunodeset": "-"}),
                     (GCP_A3ULTRA, {"a3unodeset": "rdma"})):
        capsys.readouterr()
        assert main(["show", bp]) == 0
        lines = capsys.readouterr().out.splitlines()
        header = next(ln for ln in lines if ln.startswith("NODESET "))
        for name, network in rows.items():
            row = next(ln for ln in lines if ln.startswith(name + " "))
            assert row[header.index("NETWORK"):].split()[0] == network, row
