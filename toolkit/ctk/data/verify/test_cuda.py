"""Role cuda: the pinned CUDA toolkit (nvcc, headers) from the distribution, recorded in
/etc/ctk/cuda-toolkit.json, with CUDA_HOME set for builds against it."""

import json

import pytest

from ctk.stacks.drivers import cuda_toolkit


@pytest.fixture(autouse=True)
def _only_with_cuda(roles):
    if "cuda" not in roles:
        pytest.skip("image has no cuda role")


def test_nvcc_is_the_pinned_toolkit_and_the_record_says_so(host, base):
    pinned = cuda_toolkit(base.name)
    assert pinned is not None, f"ctk pins no CUDA toolkit for base {base.name}"
    record = json.loads(host.file("/etc/ctk/cuda-toolkit.json").content_string)
    assert record["version"] == pinned.version
    out = host.check_output(f"{record['cuda_home']}/bin/nvcc --version")
    assert f"release {pinned.version}," in out
    assert host.check_output("bash -lc 'echo $CUDA_HOME'") == record["cuda_home"]


def test_the_toolkit_has_the_headers_builds_include(host):
    home = json.loads(host.file("/etc/ctk/cuda-toolkit.json").content_string)["cuda_home"]
    for header in ("cuda.h", "cuda_runtime.h", "cublas_v2.h", "cudaTypedefs.h"):
        assert host.file(f"{home}/include/{header}").exists, header
