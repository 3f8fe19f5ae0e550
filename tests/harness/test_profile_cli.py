# SPDX-License-Identifier: Apache-2.0
"""`python -m gks profile` without a GPU or ncu: its argument checks, default dtype, the
messages for a missing or unusable ncu, and the parsing of ncu's raw page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gks import registry
from gks.__main__ import main
from gks.profile import ncu

ROOT = Path(__file__).resolve().parents[2]

# ncu 2025.3's raw page (`ncu --import R --csv --page raw --metrics ...`) of an H200 run: the
# header, the units row, torch's kernels that made the inputs, then four calls of an op
# launching two kernels, the first call with an extra launch (as autotuning adds).
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","dram__bytes.sum.per_second",'
          '"dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum",'
          '"l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum","lts__t_sector_hit_rate.pct",'
          '"sm__throughput.avg.pct_of_peak_sustained_elapsed",'
          '"sm__warps_active.avg.pct_of_peak_sustained_active",'
          '"smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"\n'
          '"","","","","","","","","","","","Tbyte/s","%","us","","%","%","%","%"\n')
FILL = "void vectorized_elementwise_kernel<4, FillFunctor<float>, array<char *, 1>>(int, T2, T3)"
NORMAL = ("void distribution_elementwise_grid_stride_kernel<float, 4, normal_kernel<CUDAGenerator"
          "Impl *>(const TensorBase &, double, double, CUDAGeneratorImpl *)::[lambda(curandState"
          "Philox4_32_10 *) (instance 1)]>(long, PhiloxCudaState, T3, T4)")
CAST = ("void at::vectorized_elementwise_kernel<8, at::bfloat16_copy_kernel_cuda(at::Tensor"
        "IteratorBase &)::[lambda(float) (instance 1)], std::array<char *, 2>>(int, T2, T3)")
REDUCE, NORM = "_softmax_rmsnorm_reduce_kernel", "_softmax_rmsnorm_kernel"


def _row(i: int, name: str, dram: str = "3.912345", time_us: str = "140.256000") -> str:
    return (f'"{i}","606","python3.12","127.0.0.1","{name}","1","7","(128, 1, 1)","(1024, 1, 1)",'
            f'"0","9.0","{dram}","81.503125","{time_us}","0","12.402","31.20","88.09",'
            '"100.000000"\n')


def _raw_page(names: list[str]) -> str:
    return HEADER + "".join(_row(i, n) for i, n in enumerate(names))


CALLS = [NORMAL, FILL, NORMAL, REDUCE, REDUCE, NORM] + [REDUCE, NORM] * 3

# What ncu printed on an H200 (2025.3.1) whose counters it could read, before the raw page.
NCU_OK_OUTPUT = """\
==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling \
results may be inconsistent.
==PROF== Connected to process 606 (/usr/bin/python3.12)
==PROF== Disconnected from process 606
==PROF== Report: /root/out/t.ncu-rep
"""
NCU_NO_PERMISSION = """\
==PROF== Connected to process 9012 (/usr/bin/python3.12)
==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance \
Counters on the target device 0. For instructions on enabling permissions and to get more \
information see https://developer.nvidia.com/ERR_NVGPUCTRPERM
==PROF== Disconnected from process 9012
==WARNING== No kernels were profiled.
"""
TORCH_NO_GPU = """\
==PROF== Connected to process 4242 (/usr/bin/python3.12)
Traceback (most recent call last):
  File "/work/gks/profile/ncu.py", line 190, in _workload
    inputs = spec.make_inputs(shape, dtype, "cuda", 0)
  File "/venv/lib/python3.12/site-packages/torch/cuda/__init__.py", line 412, in _lazy_init
    torch._C._cuda_init()
RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU \
and installed a driver from http://www.nvidia.com/Download/index.aspx
==PROF== Disconnected from process 4242
==ERROR== The application returned an error code (1).
==WARNING== No kernels were profiled.
"""


def _args(**given) -> list[str]:
    given = {"kernel": "rmsnorm", "shape": "8192x4096", **given}
    return ["profile"] + [a for k, v in given.items() for a in (f"--{k}", v)]


@pytest.fixture
def no_ncu(monkeypatch):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "NCU_USUAL_PLACES", ())


@pytest.mark.parametrize("given, option, expected", [
    ({"kernel": "rms_norm"}, "--kernel", "unknown op 'rms_norm' (choose from: act_and_mul, act_and_mul_quant, apply_rope, cross_entropy, "
     "dequantize_fp8, dequantize_int8, "),
    ({"backend": "tpu"}, "--backend",
     "rmsnorm has no backend 'tpu' (choose from: cuda, triton, pallas)"),
    ({"kernel": "gemm", "shape": "64x64x64", "backend": "pallas"}, "--backend",
     "(choose from: cuda)"),
    ({"kernel": "sgemm", "shape": "64x64x64", "dtype": "bfloat16"}, "--dtype",
     "sgemm does not take 'bfloat16' (choose from: float32)"),
    ({"dtype": "fp16"}, "--dtype", "(choose from: float32, float16, bfloat16)"),
    ({"kernel": "sgemm", "shape": "8192x32768"}, "--shape",
     "'8192x32768' has 2 dims; sgemm takes 3 dims M x N x K, e.g. 4096x4096x4096"),
    ({"shape": "1x2x3"}, "--shape", "has 3 dims; rmsnorm takes 2 dims M x N"),
    ({"shape": "8192x4k"}, "--shape",
     "'8192x4k' is not integers joined by 'x'; rmsnorm takes 2 dims"),
    ({"shape": "8192x4096.5"}, "--shape", "is not integers"),
    ({"shape": "8192,4096"}, "--shape", "is not integers"),
    ({"shape": "0x4096"}, "--shape", "M (dim 1 of '0x4096') must be positive, not 0"),
    ({"shape": "8192x-1"}, "--shape", "N (dim 2 of '8192x-1') must be positive, not -1"),
    ({"kernel": "flash_attention_fwd", "shape": "1x8x8x128x128x64x2"}, "--shape",
     "causal (dim 7 of '1x8x8x128x128x64x2') is a flag, 0 or 1, not 2"),
    ({"kernel": "flash_attention_fwd", "shape": "1x8x0x128x128x64x1"}, "--shape",
     "Hkv (dim 3 of '1x8x0x128x128x64x1') must be positive"),
])
def test_a_bad_argument_is_named_before_ncu_is_looked_for(given, option, expected, monkeypatch,
                                                         capsys):
    def which(name):
        raise AssertionError("ncu was looked for before the arguments were checked")

    monkeypatch.setattr(ncu.shutil, "which", which)
    assert main(_args(**given)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gks profile: error: argument {option}: "), err
    assert expected in err, err


def test_the_kernel_list_is_the_registry(monkeypatch, capsys, no_ncu):
    assert main(_args(kernel="nope")) == 2
    listed = capsys.readouterr().err.split("(choose from: ", 1)[1].rstrip().rstrip(")")
    assert listed.split(", ") == [s.name for s in registry.ops()]


def test_cli_exit_status_and_message_in_a_subprocess():
    """As a user runs it (no ncu needed: the arguments fail first)."""
    out = subprocess.run([sys.executable, "-m", "gks", "profile", "--kernel", "sgemm", "--shape",
                          "4096x4096", "--dtype", "float32"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "argument --shape" in out.stderr and "M x N x K" in out.stderr
    assert "Traceback" not in out.stderr


def test_argparse_still_requires_kernel_and_shape(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["profile", "--shape", "8x8"])
    assert exc.value.code == 2 and "--kernel" in capsys.readouterr().err


@pytest.mark.parametrize("spec", registry.ops(), ids=lambda s: s.name)
def test_default_dtype_is_one_the_op_takes(spec):
    dtype = ncu.default_dtype(spec)
    assert dtype in spec.dtypes
    assert dtype == ("bfloat16" if "bfloat16" in spec.dtypes else spec.dtypes[0])


@pytest.mark.parametrize("kernel, shape, dtype", [
    ("sgemm", "64x64x64", "float32"),  # float32 only: the old fixed default broke it
    ("rmsnorm", "8192x4096", "bfloat16"),
    ("gemm", "64x64x64", "bfloat16"),
    ("flash_attention_fwd", "1x8x8x128x128x64x1", "bfloat16"),
])
def test_without_dtype_the_op_default_reaches_ncu(kernel, shape, dtype, monkeypatch, tmp_path):
    """The child under ncu is given the op's default dtype (and the canonical shape)."""
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 3, "", "==ERROR== something else\n")

    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/opt/ncu/ncu")
    monkeypatch.setattr(ncu.subprocess, "run", fake_run)
    monkeypatch.chdir(tmp_path)  # where --report's default lies
    assert main(["profile", "--kernel", kernel, "--shape", f" {shape.upper()} "]) == 3
    child = calls[0][calls[0].index("--workload"):]
    assert child == ["--workload", "--kernel", kernel, "--shape", shape, "--dtype", dtype,
                     "--backend", "cuda"]


def test_ncu_not_on_path(no_ncu, capsys):
    assert main(_args()) == 2
    err = capsys.readouterr().err
    assert "Nsight Compute (ncu) is not on PATH" in err and "CUDA toolkit" in err


def test_ncu_installed_but_not_on_path(monkeypatch, tmp_path, capsys):
    fake = tmp_path / "cuda" / "bin" / "ncu"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "NCU_USUAL_PLACES", (tmp_path / "nowhere" / "ncu", fake))
    assert main(_args(kernel="sgemm", shape="64x64x64")) == 2
    assert f"it is at {fake}: add {fake.parent} to PATH" in capsys.readouterr().err


@pytest.mark.parametrize("text, expected", [
    (NCU_NO_PERMISSION, "ERR_NVGPUCTRPERM"),
    ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to profile on the target "
     "device.", "NVreg_RestrictProfilingToAdminUsers=0"),
    (TORCH_NO_GPU, "no CUDA GPU is usable"),
    ("RuntimeError: No CUDA GPUs are available\n", "no CUDA GPU is usable"),
    ("AssertionError: Torch not compiled with CUDA enabled\n", "CPU-only build"),
    ("UserWarning: CUDA initialization: CUDA driver initialization failed, you might not have "
     "a CUDA gpu.", "no CUDA GPU is usable"),
    ("cudaGetDeviceCount returned 100\n-> no CUDA-capable device is detected", "no CUDA GPU"),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
     "driver is older than the CUDA version"),
    ("==ERROR== Profiling is not supported on this device\n",
     "does not support profiling this GPU"),
])
def test_ncu_failures_are_explained(text, expected):
    why = ncu.diagnose_ncu_output(text)
    assert why is not None and expected in why, why


@pytest.mark.parametrize("text", [
    "", NCU_OK_OUTPUT,
    "ModuleNotFoundError: No module named 'gks._C'\n"
    "==ERROR== The application returned an error code (1).",
    # Not an ncu error line: a device the op does not support is the op's own failure.
    "ValueError: head_dim 96 is not supported on this device",
])
def test_other_output_is_not_blamed_on_the_machine(text):
    assert ncu.diagnose_ncu_output(text) is None


def _fake_ncu(monkeypatch, profile: subprocess.CompletedProcess, page: str = ""):
    """ncu on PATH, its profiling run answering `profile` and --import answering `page`."""
    def fake_run(cmd, **kwargs):
        if "--import" in cmd:
            return subprocess.CompletedProcess(cmd, 0, page, "")
        return subprocess.CompletedProcess(cmd, profile.returncode, profile.stdout, profile.stderr)

    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/opt/ncu/ncu")
    monkeypatch.setattr(ncu.subprocess, "run", fake_run)


@pytest.mark.parametrize("returncode", [0, 1])
def test_counter_permission_is_explained_whatever_ncu_exits(returncode, monkeypatch, tmp_path,
                                                            capsys):
    _fake_ncu(monkeypatch, subprocess.CompletedProcess([], returncode, NCU_NO_PERMISSION, ""))
    assert main(_args(report=str(tmp_path / "r"))) == 2
    err = capsys.readouterr().err
    assert err.startswith("gks profile: ncu cannot profile on this machine: ncu may not read the "
                          "GPU's performance counters (ERR_NVGPUCTRPERM)")
    assert "--cap-add=SYS_ADMIN" in err and f"ncu exit {returncode}" in err
    assert "No kernels were profiled" in err  # and ncu's own words after it


def test_no_gpu_is_explained(monkeypatch, tmp_path, capsys):
    _fake_ncu(monkeypatch, subprocess.CompletedProcess([], 1, "", TORCH_NO_GPU))
    assert main(_args(report=str(tmp_path / "r"))) == 2
    assert "no CUDA GPU is usable" in capsys.readouterr().err


def test_another_ncu_failure_shows_its_output(monkeypatch, tmp_path, capsys):
    out = "==ERROR== The application returned an error code (1).\n"
    _fake_ncu(monkeypatch, subprocess.CompletedProcess([], 1, out, "ImportError: gks._C\n"))
    assert main(_args(report=str(tmp_path / "r"))) == 1
    err = capsys.readouterr().err
    assert err.startswith("gks profile: ncu failed (exit 1); its output:") and "ImportError" in err


def test_raw_page_parsing():
    units, rows = ncu.parse_raw_page(_raw_page(CALLS))
    assert units["dram__bytes.sum.per_second"] == "Tbyte/s"
    assert units["gpu__time_duration.sum"] == "us"
    assert [r["Kernel Name"] for r in rows] == CALLS
    assert rows[0]["dram__bytes.sum.per_second"] == "3.912345"
    assert set(ncu.METRICS) <= set(rows[0])
    assert ncu.parse_raw_page("") == ({}, [])


@pytest.mark.parametrize("names, last", [
    (CALLS, [REDUCE, NORM]),
    # One kernel a call, after torch's (ncu 2025 drops their at::native:: prefix).
    ([NORMAL, FILL, NORMAL] + [NORM] * 4, [NORM]),
    # What an H200 recorded for `--kernel softmax_rmsnorm --backend triton`: torch's kernels
    # (named with at:: in that run) then four calls of one kernel.
    ([f"void at::<unnamed>::{NORMAL[5:]}", CAST, f"void at::<unnamed>::{NORMAL[5:]}",
      "void at::vectorized_elementwise_kernel<4, at::CUDAFunctorOnSelf_add<float>, "
      "std::array<char *, 2>>(int, T2, T3)", CAST] + ["_softmax_kernel"] * 4, ["_softmax_kernel"]),
    # A split-K call: zero the workspace (torch's fill kernel), the GEMM, the reduction.
    ([NORMAL, NORMAL] + [FILL, "gemm_kernel", "splitk_reduce"] * 4,
     [FILL, "gemm_kernel", "splitk_reduce"]),
    # Too few rows to repeat: older ncu's torch kernels are left out, the rest shared out.
    ([f"void at::native::{FILL}", NORM], [NORM]),
])
def test_the_last_call_is_what_gets_printed(names, last):
    rows = ncu.parse_raw_page(_raw_page(names))[1]
    got = ncu.last_call_rows(rows)
    assert [r["Kernel Name"] for r in got] == last
    assert got == rows[-len(last):]


def test_a_working_profile_prints_as_before(monkeypatch, tmp_path, capsys):
    page = HEADER + "".join(_row(i, n) for i, n in enumerate(CALLS[:-1])) + _row(
        len(CALLS), NORM, dram="4.101000", time_us="133.408000")
    _fake_ncu(monkeypatch, subprocess.CompletedProcess([], 0, NCU_OK_OUTPUT, ""), page)
    report = tmp_path / "out" / "softmax_rmsnorm.ncu-rep"  # the suffix is ncu's to add
    assert main(_args(kernel="softmax_rmsnorm", report=str(report))) == 0
    assert (tmp_path / "out").is_dir()
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"kernel: {REDUCE}",
        "  DRAM throughput (% of peak)        81.503125",
        "  DRAM bandwidth                     3.912345 Tbyte/s",
        "  achieved occupancy (%)             88.09",
        "  shared-memory bank conflicts       0",
        "  L2 hit rate (%)                    12.402",
        "  global load efficiency (%)         100.000000",
        "  kernel time                        140.256000 us",
        "  SM throughput (% of peak)          31.20",
        f"kernel: {NORM}",
        "  DRAM throughput (% of peak)        81.503125",
        "  DRAM bandwidth                     4.101000 Tbyte/s",
        "  achieved occupancy (%)             88.09",
        "  shared-memory bank conflicts       0",
        "  L2 hit rate (%)                    12.402",
        "  global load efficiency (%)         100.000000",
        "  kernel time                        133.408000 us",
        "  SM throughput (% of peak)          31.20",
        f"raw report: {tmp_path / 'out' / 'softmax_rmsnorm'}.ncu-rep",
    ]


def test_an_empty_report_says_so(monkeypatch, tmp_path, capsys):
    nothing = "==WARNING== No kernels were profiled.\n"
    _fake_ncu(monkeypatch, subprocess.CompletedProcess([], 0, nothing, ""), HEADER)
    assert main(_args(report=str(tmp_path / "r"))) == 1
    err = capsys.readouterr().err
    assert "ncu recorded no kernel" in err and "No kernels were profiled" in err
