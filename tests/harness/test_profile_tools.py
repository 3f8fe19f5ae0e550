# SPDX-License-Identifier: Apache-2.0
"""The pure parts of the profiling tools: roofline math, the bench table's inputs, baseline
pinning. None needs a GPU."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import import_tool
from gks import registry
from gks.profile import roofline

ROOT = Path(__file__).resolve().parents[2]
CEIL = {"source": "test", "copy_gbps": 4000.0, "fp32_tflops": 50.0, "fp16_tflops": 700.0,
        "bf16_tflops": 740.0, "int8_tops": 1500.0}


def _row(op, variant, kind, shape, dtype, us, tflops=1.0, gbps=1000.0):
    return {"op": op, "variant": variant, "kind": kind, "shape": list(shape), "dtype": dtype,
            "median_us": us, "p20_us": us, "p80_us": us, "gbps": gbps, "tflops": tflops,
            "checked": "ok" if kind == "gks" else "n/a", "vs_peers": {}}


def test_attainable_is_the_lower_of_the_two_roofs():
    assert roofline.attainable_tflops(1.0, 700.0, 4000.0) == pytest.approx(4.0)  # 1 FLOP/B x 4 TB/s
    assert roofline.attainable_tflops(1e4, 700.0, 4000.0) == 700.0


def test_compute_peak_by_unit_and_dtype():
    assert roofline.compute_peak(CEIL, "fp32", "float32") == 50.0
    assert roofline.compute_peak(CEIL, "tensor", "bfloat16") == 740.0
    assert roofline.compute_peak(CEIL, "tensor", "float16") == 700.0
    assert roofline.compute_peak(CEIL, "int8", "float16") == 1500.0


def test_analyse_places_rows_on_the_roofline():
    rows = [_row("rmsnorm", "gks.cuda", "gks", (32768, 4096), "bfloat16", 140.0, tflops=3.8),
            _row("sgemm", "gks.cuda", "gks", (4096, 4096, 4096), "float32", 3300.0, tflops=41.6),
            {"op": "rmsnorm", "variant": "x", "kind": "gks", "shape": [1, 1], "dtype": "float32",
             "checked": "FAILED to run"}]
    out = roofline.analyse(rows, CEIL)
    assert len(out) == 2  # the row that did not run is left out
    norm, gemm = out
    assert norm["bound"] == "memory" and norm["intensity"] == pytest.approx(1.0, rel=1e-3)
    assert norm["frac_roof"] == pytest.approx(3.8 / 4.0, rel=1e-3)
    assert gemm["bound"] == "compute" and gemm["frac_roof"] == pytest.approx(41.6 / 50.0)


def test_datasheet_ceilings_and_unknown_device():
    c = roofline.ceilings(datasheet=True, device_name="NVIDIA H200")
    assert c["source"] == "datasheet" and c["copy_gbps"] == 4800
    with pytest.raises(KeyError, match="no datasheet figures"):
        roofline.ceilings(datasheet=True, device_name="Some GPU")


def test_cli_roofline_without_gpu_asks_for_datasheet():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = subprocess.run([sys.executable, "-m", "gks", "roofline"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "--datasheet" in out.stderr


def test_baseline_pins_fastest_peer(tmp_path):
    make_baseline = import_tool("make_baseline")

    doc = {"device": {"name": "NVIDIA H200", "capability": "9.0", "sms": 132, "driver": "580",
                      "clocks_start": {"sm_mhz": "345"}, "clocks_end": {"sm_mhz": "1980"}},
           "versions": {"torch": "2.11", "triton": "3.6", "jax": "0.11.2"}, "copy_gbps": 4250.0,
           "rows": [_row("rmsnorm", "gks.cuda", "gks", (8, 8), "float32", 10.0),
                    _row("rmsnorm", "F.rms_norm", "peer", (8, 8), "float32", 15.0),
                    _row("rmsnorm", "torch.compile", "peer", (8, 8), "float32", 12.0)]}
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(doc))
    assert make_baseline.main([str(src), "--out-dir", str(tmp_path)]) == 0
    pinned = json.loads((tmp_path / "baseline.json").read_text())["rows"]
    assert pinned == [{"op": "rmsnorm", "backend": "cuda", "shape": [8, 8], "dtype": "float32",
                       "ours_us": 10.0, "gbps": 1000, "tflops": 1.0, "fastest_ref": "torch.compile",
                       "ref_us": 12.0, "ref_over_ours": 1.2, "checked": "ok", "run": "bench.json"}]
    md = (tmp_path / "baseline.md").read_text()
    assert "| rmsnorm | cuda | 8x8 | float32 | 10.0 |" in md
    # What the run left out is named: here rmsnorm's other backends and every other op.
    missing = md.split("Not in these runs: ", 1)[1].split("\n", 1)[0]
    assert "rmsnorm (triton, pallas)" in missing and "softmax (cuda, triton, pallas)" in missing

    # A run split per op merges; each row is compared with the peers of its own file only.
    other = dict(doc, copy_gbps=4200.0,
                 rows=[_row("softmax", "gks.cuda", "gks", (8, 8), "float32", 5.0),
                       _row("softmax", "torch.compile", "peer", (8, 8), "float32", 4.0),
                       _row("rmsnorm", "torch.compile", "peer", (8, 8), "float32", 1.0)])
    src2 = tmp_path / "bench-softmax.json"
    src2.write_text(json.dumps(other))
    assert make_baseline.main([str(src), str(src2), "--out-dir", str(tmp_path)]) == 0
    merged = json.loads((tmp_path / "baseline.json").read_text())
    assert [(r["op"], r["ref_us"], r["run"]) for r in merged["rows"]] == [
        ("rmsnorm", 12.0, "bench.json"), ("softmax", 4.0, "bench-softmax.json")]
    assert set(merged["runs"]) == {"bench.json", "bench-softmax.json"}
    assert "4200 GB/s" in (tmp_path / "baseline.md").read_text()

    # A later file's row of the same op, backend, shape and dtype supersedes the earlier one,
    # still against the peers of its own file.
    rerun = dict(doc, rows=[_row("rmsnorm", "gks.cuda", "gks", (8, 8), "float32", 8.0),
                            _row("rmsnorm", "torch.compile", "peer", (8, 8), "float32", 9.0)])
    src3 = tmp_path / "bench-rmsnorm-rerun.json"
    src3.write_text(json.dumps(rerun))
    assert make_baseline.main([str(src), str(src2), str(src3), "--out-dir", str(tmp_path)]) == 0
    merged = json.loads((tmp_path / "baseline.json").read_text())
    assert [(r["op"], r["ours_us"], r["ref_us"], r["run"]) for r in merged["rows"]] == [
        ("softmax", 5.0, 4.0, "bench-softmax.json"), ("rmsnorm", 8.0, 9.0, "bench-rmsnorm-rerun.json")]

    # A shape the run timed twice counts once, its first timing, ours and peer alike (not our
    # second timing against the faster peer of either).
    twice = dict(doc, rows=[_row("rmsnorm", "gks.cuda", "gks", (8, 8), "float32", 10.0),
                            _row("rmsnorm", "torch.compile", "peer", (8, 8), "float32", 9.0),
                            _row("rmsnorm", "gks.cuda", "gks", (8, 8), "float32", 11.0),
                            _row("rmsnorm", "torch.compile", "peer", (8, 8), "float32", 12.0)])
    src4 = tmp_path / "bench-twice.json"
    src4.write_text(json.dumps(twice))
    assert make_baseline.main([str(src4), "--out-dir", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "baseline.json").read_text())["rows"]
    assert [(r["ours_us"], r["ref_us"]) for r in rows] == [(10.0, 9.0)]

    # A file that is not a bench JSON is refused with its name.
    bad = tmp_path / "baseline-old.json"
    bad.write_text(json.dumps({"rows": []}))
    assert make_baseline.main([str(src), str(bad), "--out-dir", str(tmp_path)]) == 2

    # Runs of another device or other versions are refused.
    src2.write_text(json.dumps(dict(other, versions={"torch": "2.10"})))
    assert make_baseline.main([str(src), str(src2), "--out-dir", str(tmp_path)]) == 2


def test_roofline_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    doc = {"device": {"name": "NVIDIA H200"}, "ceilings": CEIL, "copy_gbps": 4000.0,
           "rows": [_row("rmsnorm", "gks.cuda", "gks", (32768, 4096), "bfloat16", 140.0, tflops=3.8)]}
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "roofline_plot.py"), str(src), "-o",
                          str(tmp_path / "r.png")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r.png").stat().st_size > 1000
    assert "memory" in out.stdout


@pytest.mark.parametrize("kernel", [s.name for s in registry.ops()
                                    if any(b.name == "triton" for b in s.backends)])
def test_dump_triton_ir_covers_every_triton_op(kernel, tmp_path):
    """Every op's Triton kernels compile for sm_90 from the recorded launches, meta-parameters
    left at their defaults included (the GEMM's SPLIT_K)."""
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "dump_triton_ir.py"), "--kernel", kernel,
                          "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert list(tmp_path.glob("*.ptx")), kernel


def test_dump_triton_ir_of_one_gemm_block_shape(tmp_path):
    """--config dumps the kernel a Triton GEMM block shape runs on a GPU: its block sizes,
    warps and stages (shared memory = stages x the A and B tiles), TMA copies for a TMA
    block; a config of another op, or out of range, is refused by name."""
    import gks.triton

    names = gks.triton.gemm_config_names("wmma_gemm")
    tma = names.index("64x128x64_w4_s4_tma")
    tool = [sys.executable, str(ROOT / "tools" / "dump_triton_ir.py")]
    out = subprocess.run(tool + ["--kernel", "wmma_gemm", "--shape", "128x256x256", "--config", str(tma),
                                 "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "_gemm_tma_kernel: num_warps=4 shared=98" in out.stdout  # 4 x (64x64 + 64x128) x 2 B
    ptx = next(tmp_path.glob("_gemm_tma_kernel_*.ptx")).read_text()
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx
    for argv, message in ((["--kernel", "rmsnorm", "--config", "0"], "applies to the Triton GEMMs"),
                          (["--kernel", "sgemm", "--config", "99"], "--config must be below")):
        out = subprocess.run(tool + argv + ["--out", str(tmp_path)], capture_output=True, text=True,
                             cwd=ROOT, timeout=600)
        assert out.returncode != 0 and message in out.stderr, out.stderr[-2000:]


def test_dump_triton_ir_records_the_gpu_variant(tmp_path):
    """quantize_int8 gives the interpreter a kernel variant of its own; the dump is of the
    one a GPU runs: a long 16-bit row held as int32 pairs, its q interleaved by tt.join,
    under a register cap of 32."""
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "dump_triton_ir.py"), "--kernel",
                          "quantize_int8", "--dtype", "float16", "--shape", "4x32768", "--out", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    ttgir = next(tmp_path.glob("_quantize_kernel_*.ttgir")).read_text()
    assert "tt.join" in ttgir and "ttg.maxnreg = 32" in ttgir


def test_dump_triton_ir_without_a_gpu(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "dump_triton_ir.py"), "--kernel", "rmsnorm",
                          "--dtype", "float32", "--shape", "4x256", "--out", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    for ext in ("ttir", "ttgir", "llir", "ptx"):
        assert list(tmp_path.glob(f"_rmsnorm_kernel_*.{ext}")), ext
    # Compiled as the JIT compiles on a GPU: aligned pointers and multiples of 16 carry
    # tt.divisibility (without it every load would be scalar), so 16-byte loads appear.
    ttir = next(tmp_path.glob("_rmsnorm_kernel_*.ttir")).read_text()
    assert "tt.divisibility = 16" in ttir
    assert "ld.global.v4" in next(tmp_path.glob("_rmsnorm_kernel_*.ptx")).read_text()


def _dump_sass_module():
    return import_tool("dump_sass")


def test_dump_sass_tells_serialized_wgmmas_from_batched():
    dump_sass = _dump_sass_module()
    # As cuobjdump prints them: ptxas gives the last wgmma of a batch a scoreboard (gsb0);
    # serialized, every wgmma has one and waits for it.
    head = "\tarch = sm_90a\n\t\tFunction : kern\n"
    batched = head + "\n".join([
        "        /*1120*/                   WARPGROUP.ARRIVE ;",
        "        /*12b0*/                   HGMMA.64x256x16.F32 R24, gdesc[UR20].tnspB, R24, UP0 ;",
        "        /*1420*/                   HGMMA.64x256x16.F32 R24, gdesc[UR20].tnspB, R24 ;",
        "        /*15a0*/                   HGMMA.64x256x16.F32 R24, gdesc[UR20].tnspB, R24, gsb0 ;",
        "        /*15b0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;"])
    serialized = head + "\n".join([
        "        /*1190*/                   HGMMA.64x256x16.F32 R24, gdesc[UR20].tnspB, R24, UP0, gsb0 ;",
        "        /*1310*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
        "        /*1330*/                   HGMMA.64x256x16.F32 R24, gdesc[UR20].tnspB, R24, gsb0 ;",
        "        /*1420*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;"])
    ok = dump_sass.parse_sass(batched)[("sm_90a", "kern")]
    bad = dump_sass.parse_sass(serialized)[("sm_90a", "kern")]
    assert (ok["HGMMA"], ok["GMMA_BATCHED"]) == (3, 2)
    assert (bad["HGMMA"], bad["GMMA_BATCHED"]) == (2, 0)
    assert not dump_sass.serialized_wgmma(ok) and dump_sass.serialized_wgmma(bad)


def test_dump_sass_counts_generic_loads_and_stores():
    dump_sass = _dump_sass_module()
    sass = "\tarch = sm_90a\n\t\tFunction : kern\n" + "\n".join([
        "        /*1cf0*/                   LD.E.64 R14, desc[UR38][R12.64] ;",
        "        /*1d00*/              @!P0 ST.E.128 desc[UR38][R2.64], R4 ;",
        "        /*1d10*/                   LDS.64 R14, [R3+0x40] ;",
        "        /*1d20*/                   LDG.E.128 R4, desc[UR8][R2.64] ;",
        "        /*1d30*/                   STL [R1+0x18], R6 ;"])
    c = dump_sass.parse_sass(sass)[("sm_90a", "kern")]
    assert dump_sass.generic_accesses(c) == 2 and c["LDS.64"] == 1 and c["LDG.128"] == 1


@functools.lru_cache(maxsize=1)
def _wgmma_counts(lib: Path) -> dict:
    """The sm_90a kernels of `lib` with wgmmas: mangled name -> instruction counts; one SASS
    dump (about a minute) for the guards below."""
    dump_sass = _dump_sass_module()
    sass = subprocess.run([dump_sass.find_cuobjdump(), "--dump-sass", "--gpu-architecture", "sm_90a", str(lib)],
                          capture_output=True, text=True)
    counts = dump_sass.parse_sass(sass.stdout)
    return {f: c for (arch, f), c in counts.items() if c["HGMMA"] + c["IGMMA"] > 0}


def _built_wgmma_kernels() -> dict:
    from gks import _native

    lib = _native.library_path()
    if lib is None or not lib.is_file():
        pytest.skip("the gks CUDA library is not built")
    kernels = _wgmma_counts(lib)
    if not kernels:
        pytest.skip("the library was built without sm_90a")
    return kernels


# Hopper kernels still aligning their shared memory through an integer (generic accesses),
# until branch smem-space-fwd-gemm has run on a GPU.
_GENERIC_YET = ("flash_attention_fwd_ws_kernel", "flash_attention_fwd_wgmma_kernel", "gemm4sm9011gemm_kernel")


def test_built_hopper_kernels_use_no_generic_loads_or_stores():
    """A guard on the built library (CI builds sm_90a): a Hopper kernel whose shared memory
    is aligned through an integer accesses it with generic LD / ST, which cost the attention
    backward's main kernel about a tenth of its time on an H100 (run s54). No wgmma kernel
    has generic accesses but those listed in _GENERIC_YET."""
    dump_sass = _dump_sass_module()
    with_wgmma = _built_wgmma_kernels()
    generic = [f for f, c in with_wgmma.items()
               if dump_sass.generic_accesses(c) and not any(k in f for k in _GENERIC_YET)]
    assert not generic, f"generic loads / stores in: {generic}"
    assert any("flash_attention_bwd_ws_kernel" in f for f in with_wgmma)


def test_built_hopper_kernels_issue_their_wgmmas_back_to_back():
    """A guard on the built library (CI builds sm_90a): ptxas serializes wgmmas when it sees a
    possibly divergent branch or non-wgmma writes of the accumulators inside the main loop,
    which cost the Hopper GEMM about 5-10% on an H200. Every kernel with wgmmas must issue
    some of them back to back."""
    dump_sass = _dump_sass_module()
    with_wgmma = _built_wgmma_kernels()
    serialized = [f for f, c in with_wgmma.items() if dump_sass.serialized_wgmma(c)]
    assert not serialized, f"wgmmas serialized by ptxas in: {serialized}"
