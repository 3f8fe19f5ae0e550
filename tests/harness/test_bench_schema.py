# SPDX-License-Identifier: Apache-2.0
"""The bench JSON against the schema its module documents, every op's FLOP and byte formulas
against hand counts, and the roofline table and plot labels. None needs a GPU."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from conftest import HAS_GPU, import_tool
from gks import registry
from gks.profile import bench, roofline, timing

ROOT = Path(__file__).resolve().parents[2]
MEASURED = {"copy_gbps": 4000.0, "fp32_tflops": 50.0, "fp16_tflops": 700.0, "bf16_tflops": 740.0,
            "int8_tops": 1500.0}
DEVICE_KEY = "NVIDIA H200|sm_90|13.0"
COPY_GBPS = 4250.0

# ---------------------------------------------------------------------------------------------
# The documented schema, read from gks/profile/bench.py's docstring

TYPE = r"object|str|int|float|dict\[str, (?:str|float)\]|list\[(?:int|object)\]"
KEY_LINE = re.compile(rf"^(?P<indent> +)(?P<name>\w+): (?P<type>{TYPE})(?P<null> \| null)?(?:\s{{2,}}|$)")
TIMED_ONLY_MARK = "Keys of a row whose variant ran"


def documented_schema() -> dict:
    """{key: {"type", "nullable", "timed_only", "keys": {...}}} from the bench docstring."""
    text = bench.__doc__.split("JSON schema", 1)[1]
    root = {"keys": {}}
    stack = [(0, root)]  # (indent of the keys, node holding them)
    timed_only = False
    for line in text.splitlines():
        if TIMED_ONLY_MARK in line:
            timed_only = True
            continue
        m = KEY_LINE.match(line)
        if not m:
            continue
        indent = len(m["indent"])
        while stack[-1][0] >= indent and len(stack) > 1:
            stack.pop()
        parent = stack[-1][1]
        node = {"type": m["type"], "nullable": bool(m["null"]), "timed_only": timed_only and indent > 2,
                "keys": {}}
        parent["keys"][m["name"]] = node
        stack.append((indent, node))
    return root["keys"]


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_value(value, node: dict, where: str) -> None:
    if value is None:
        assert node["nullable"], f"{where} is null, but the schema does not allow it"
        return
    kind = node["type"]
    if kind == "str":
        assert isinstance(value, str), f"{where}: {value!r} is not a str"
    elif kind == "int":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an int"
    elif kind == "float":
        assert _is_number(value), f"{where}: {value!r} is not a number"
    elif kind == "list[int]":
        assert isinstance(value, list) and all(isinstance(x, int) for x in value), f"{where}: {value!r}"
    elif kind.startswith("dict[str, "):
        want = str if kind == "dict[str, str]" else float
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        for k, v in value.items():
            assert isinstance(k, str) and (isinstance(v, str) if want is str else _is_number(v)), \
                f"{where}[{k!r}]: {v!r}"
    elif kind == "object":
        check_object(value, node["keys"], where)
    elif kind == "list[object]":
        assert isinstance(value, list), f"{where}: {value!r} is not a list"
        for i, item in enumerate(value):
            check_object(item, node["keys"], f"{where}[{i}]")
    else:
        raise AssertionError(f"{where}: the test knows no type {kind!r}")


def check_object(obj, keys: dict, where: str) -> None:
    """Exactly the documented keys (the timed-only ones iff the row was timed), each typed."""
    assert isinstance(obj, dict), f"{where}: {obj!r} is not an object"
    timed = "median_us" in obj
    want = {k for k, node in keys.items() if timed or not node["timed_only"]}
    assert set(obj) == want, (f"{where}: keys not documented {sorted(set(obj) - want)}, documented "
                              f"but missing {sorted(want - set(obj))}")
    for k in want:
        check_value(obj[k], keys[k], f"{where}.{k}")


def test_the_documented_schema_is_read_whole():
    schema = documented_schema()
    assert list(schema) == ["device", "versions", "copy_gbps", "ceilings", "rows"]
    assert schema["ceilings"]["nullable"]
    assert set(schema["ceilings"]["keys"]) == {"source", "device", *MEASURED}
    rows = schema["rows"]["keys"]
    always = [k for k, n in rows.items() if not n["timed_only"]]
    timed = [k for k, n in rows.items() if n["timed_only"]]
    assert always == ["op", "variant", "kind", "shape", "dtype", "checked"]
    assert timed == ["median_us", "p20_us", "p80_us", "gbps", "tflops", "frac_copy_bw", "vs_peers",
                     *roofline.PLACE_FIELDS]
    assert [k for k in timed if rows[k]["nullable"]] == list(roofline.PLACE_FIELDS)


# ---------------------------------------------------------------------------------------------
# A bench run through `gks bench`'s own code, with the GPU's parts stood in for


def _variant(name: str, samples_us: list[float]) -> timing.Variant:
    return timing.Variant(name, fn=None, input_sets=[], samples_ms=[t * 1e-3 for t in samples_us])


def fake_bench_op(spec, *, backends, dtypes, shapes, with_references, reps, progress, configs=False):
    """bench_op's rows for one shape and dtype, from made-up timings: the heuristic's pick, a
    config whose name holds a dot, a peer that ran and one that failed to run."""
    (shape,), (dtype,) = shapes, dtypes
    progress(f"{spec.name} {shape} {dtype}")
    ours = _variant("gks.cuda", [10.0, 11.0, 12.0, 13.0, 30.0])
    config = _variant("gks.cuda[mma.sync_2]", [20.0, 21.0, 22.0])
    peer = _variant("torch.compile", [15.0, 16.0, 17.0])
    peers = {peer.name: peer.median_ms}
    return [bench.timed_row(spec, ours, "gks", shape, dtype, "ok", peers),
            bench.timed_row(spec, config, "gks", shape, dtype, "ok", peers),
            bench.timed_row(spec, peer, "peer", shape, dtype, "n/a", peers),
            bench.failed_row(spec, "sdpa-cudnn", "peer", shape, dtype, "FAILED to run: RuntimeError: no")]


@pytest.fixture
def bench_without_gpu(monkeypatch, tmp_path):
    """`gks bench` with the GPU's parts stood in for: timings, device, copy bandwidth, and a
    ceilings cache under tmp_path (empty until a test measures into it)."""
    import torch

    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(roofline, "device_key", lambda: DEVICE_KEY)
    monkeypatch.setattr(roofline, "measure", lambda: dict(MEASURED))
    monkeypatch.setattr(timing, "copy_bandwidth_gbps", lambda: COPY_GBPS)
    monkeypatch.setattr(bench, "bench_op", fake_bench_op)
    monkeypatch.setattr(bench, "_device_info", lambda: {
        "name": "NVIDIA H200", "capability": "9.0", "sms": 132, "l2_bytes": 62914560,
        "clocks_start": timing.gpu_clocks(), "driver": "580.159.04"})


def _run_bench(tmp_path, kernels: list[str], shapes: str) -> dict:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    out = tmp_path / "out" / "bench.json"
    argv = [a for k in kernels for a in ("--kernel", k)] + ["--shapes", shapes, "--json", str(out)]
    assert bench.run(parser.parse_args(argv)) == 0
    text = out.read_text()
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the bench JSON"))


KERNELS = [s.name for s in registry.ops()]
SHAPES = ("24x40,16x32x64,8x256x2x1,8x4x2x16x8,16x32x64x2x1x0,1x4x2x16x24x8x1,2x2x2x16x16x32x0,"
          "2x2x2x16x16x32x0x16")


@pytest.mark.parametrize("with_ceilings", [True, False], ids=["ceilings", "no-ceilings"])
def test_bench_json_matches_its_documented_schema(bench_without_gpu, tmp_path, with_ceilings):
    if with_ceilings:
        roofline.ceilings(remeasure=True)  # what `gks roofline --measure` caches
    doc = _run_bench(tmp_path, KERNELS, SHAPES)
    check_object(doc, documented_schema(), "bench")

    # A job per dtype and per shape of SHAPES with as many dims as the op's shapes.
    shapes = [tuple(int(d) for d in x.split("x")) for x in SHAPES.split(",")]
    jobs = sum(len(s.dtypes) * sum(s.fits_shape(shape) for shape in shapes) for s in registry.ops())
    assert len(doc["rows"]) == 4 * jobs
    assert doc["copy_gbps"] == COPY_GBPS
    timed = [r for r in doc["rows"] if "median_us" in r]
    assert len(timed) == 3 * jobs
    for r in doc["rows"]:
        assert r["kind"] in ("gks", "peer")
        assert r["checked"] in ("ok", "n/a") or r["checked"].startswith(("FAILED", "n/a: "))
    if not with_ceilings:
        assert doc["ceilings"] is None
        for r in timed:
            assert r["intensity"] is not None  # the spec's, needs no ceilings
            assert all(r[k] is None for k in ("binding_ceiling", "bound", "roof_tflops", "frac_roof"))
        return

    assert doc["ceilings"] == {"source": "measured", "device": DEVICE_KEY, **MEASURED}
    # The rows' roofline fields are what `gks roofline --bench` gives against the same ceilings.
    assert [{k: r[k] for k in roofline.PLACE_FIELDS} for r in timed] == \
        [{k: r[k] for k in roofline.PLACE_FIELDS} for r in roofline.analyse(timed, doc["ceilings"])]
    compute_ceilings = {"fp32_tflops", "fp16_tflops", "bf16_tflops", "int8_tops"}
    for r in timed:
        spec = registry.get(r["op"])
        shape = tuple(r["shape"])
        seconds = r["median_us"] * 1e-6
        assert r["gbps"] == pytest.approx(spec.bytes_moved(shape, r["dtype"]) / seconds / 1e9)
        assert r["tflops"] == pytest.approx(spec.flops(shape) / seconds / 1e12)
        assert r["frac_copy_bw"] == pytest.approx(r["gbps"] / COPY_GBPS)
        assert r["intensity"] == pytest.approx(spec.arithmetic_intensity(shape, r["dtype"]))
        assert r["bound"] in ("memory", "compute")
        assert (r["binding_ceiling"] == "copy_gbps") == (r["bound"] == "memory")
        assert r["binding_ceiling"] in compute_ceilings | {"copy_gbps"}
        assert r["roof_tflops"] == pytest.approx(min(
            MEASURED[roofline.compute_ceiling(spec.compute, r["dtype"])],
            r["intensity"] * MEASURED["copy_gbps"] / 1e3))
        assert r["frac_roof"] == pytest.approx(r["tflops"] / r["roof_tflops"])
    by_variant = {(r["op"], r["variant"], r["dtype"], tuple(r["shape"])): r for r in timed}
    ours = by_variant[("rmsnorm", "gks.cuda", "bfloat16", (24, 40))]
    assert (ours["median_us"], ours["p20_us"], ours["p80_us"]) == pytest.approx((12.0, 11.0, 13.0))
    assert ours["vs_peers"] == {"torch.compile": pytest.approx(16.0 / 12.0)}
    assert by_variant[("rmsnorm", "torch.compile", "bfloat16", (24, 40))]["vs_peers"] == {}
    assert ours["binding_ceiling"] == "copy_gbps"
    gemm = by_variant[("gemm", "gks.cuda", "bfloat16", (16, 32, 64))]
    assert gemm["binding_ceiling"] == "copy_gbps"  # 16x32x64 moves much for its FLOPs
    assert by_variant[("int8_gemm", "gks.cuda", "float16", (16, 32, 64))]["roof_tflops"] < MEASURED["int8_tops"]


def test_place_names_the_binding_ceiling():
    gemm = registry.get("gemm")
    big = roofline.place(gemm, (8192, 8192, 8192), "bfloat16", 600.0, MEASURED)
    assert big == {"intensity": pytest.approx(8192 / 3), "binding_ceiling": "bf16_tflops",
                   "bound": "compute", "roof_tflops": 740.0, "frac_roof": pytest.approx(600 / 740)}
    int8 = roofline.place(registry.get("int8_gemm"), (8192, 8192, 8192), "float32", 750.0, MEASURED)
    assert (int8["binding_ceiling"], int8["roof_tflops"]) == ("int8_tops", 1500.0)
    norm = roofline.place(registry.get("rmsnorm"), (32768, 4096), "float32", 1.0, MEASURED)
    assert (norm["binding_ceiling"], norm["bound"]) == ("copy_gbps", "memory")
    assert norm["roof_tflops"] == pytest.approx(0.5 * 4000 / 1e3, rel=1e-3)
    assert roofline.place(gemm, (8192, 8192, 8192), "float16", 1.0, None) == {
        "intensity": pytest.approx(8192 / 3), "binding_ceiling": None, "bound": None,
        "roof_tflops": None, "frac_roof": None}
    # An empty shape moves no bytes: nothing to place, and no division by zero.
    nothing = roofline.place(registry.get("quantize_int8"), (0, 64), "float32", 0.0, MEASURED)
    assert set(nothing.values()) == {None}
    # No FLOPs (but the weight's bytes): a roof of 0, whose fraction is null rather than NaN,
    # which JSON lacks.
    empty = roofline.place(registry.get("rmsnorm"), (0, 64), "float32", 0.0, MEASURED)
    assert empty["roof_tflops"] == 0.0 and empty["frac_roof"] is None


def test_bench_document_leaves_its_input_rows_alone():
    spec = registry.get("softmax")
    row = bench.timed_row(spec, _variant("gks.triton", [5.0]), "gks", (8, 8), "float32", "ok", {})
    before = json.dumps(row)
    doc = bench.bench_document([row], device={}, versions={}, copy_gbps=1000.0, ceilings=None)
    assert json.dumps(row) == before and doc["rows"][0] is not row
    assert doc["rows"][0]["frac_copy_bw"] == pytest.approx(row["gbps"] / 1000.0)


def test_bench_without_gpu_says_no_json_is_written(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(bench, "interpreter_sweep", lambda specs, dtypes, **kw: (1, 0))
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    out = tmp_path / "bench.json"
    assert bench.run(parser.parse_args(["--kernel", "rmsnorm", "--json", str(out)])) == 0
    assert "no " + str(out) + " written" in capsys.readouterr().out and not out.exists()


def _bench_cli(argv, monkeypatch):
    """`gks bench ...` as a machine without a GPU runs it."""
    import torch

    from gks.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return main(["bench", *argv])


@pytest.mark.parametrize("argv, message", [
    (["--kernel", "rmsnorm", "--backends", "foo"], "argument --backends: 'foo' is not a backend (cuda, triton, pallas)"),
    (["--kernel", "gemm", "--backends", "triton"], "argument --backends: none of triton is a backend of gemm"),
    (["--kernel", "gemm", "--dtypes", "int8"], "argument --dtypes: 'int8' is not a dtype of gemm (bfloat16, float16)"),
    (["--kernel", "gemm", "--backends", "cuda"], "the interpreter sweep ran nothing"),
])
def test_bench_refuses_what_it_cannot_honour(argv, message, monkeypatch, capsys):
    assert _bench_cli(argv, monkeypatch) == 2
    assert message in capsys.readouterr().err


def test_bench_takes_no_abbreviated_option(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_:
        _bench_cli(["--kernel", "rmsnorm", "--dtype", "float32"], monkeypatch)
    assert exit_.value.code == 2 and "unrecognized arguments: --dtype" in capsys.readouterr().err


@pytest.mark.skipif(HAS_GPU, reason="runs Triton in its interpreter, which is chosen "
                    "before triton loads: a machine without a GPU only")
def test_bench_sweep_honours_backends_dtypes_and_shapes(monkeypatch, capsys):
    argv = ["--kernel", "rmsnorm", "--backends", "triton", "--dtypes", "float16", "--shapes", "3x40,2x7"]
    assert _bench_cli(argv, monkeypatch) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("rmsnorm ")]
    assert sorted((r[1], r[2], r[3], r[4]) for r in rows) == [
        ("triton", "float16", "2x7", "ok"), ("triton", "float16", "3x40", "ok")]
    assert "interpreter sweep: 2 cases, all ok" in out


# ---------------------------------------------------------------------------------------------
# FLOP and byte formulas, counted by hand from what each op reads and writes

F32, F16, BF16 = "float32", "float16", "bfloat16"
ATTENTION_BYTES_16 = 2 * (192 + 2 * 160 + 192) + 4 * 24

# (op, shape, dtype) -> (FLOPs, bytes). Row ops on x [3, 5]; GEMMs on (M, N, K) = (2, 3, 4):
# a [2, 4], b [4, 3], c [2, 3]; attention on q [2, 4, 3, 8], k and v [2, 2, 5, 8].
FORMULAS = {
    # x^2, sum, * inv_rms, * weight: 4 per element. Read x [3, 5] and weight [5], write y [3, 5].
    ("rmsnorm", (3, 5), F32): (4 * 15, 4 * (15 + 5 + 15)),
    ("rmsnorm", (3, 5), F16): (4 * 15, 2 * (15 + 5 + 15)),
    ("rmsnorm", (3, 5), BF16): (4 * 15, 2 * (15 + 5 + 15)),
    # rmsnorm_bwd: x^2 and its sum, g = dy * w, g * x and its sum, xhat = x * rstd, xhat * c,
    # g minus it, times rstd, dy * xhat and its sum over rows: 11 per element. Read dy, x
    # [3, 5] and weight [5]; write dx [3, 5] and dweight [5].
    ("rmsnorm_bwd", (3, 5), F32): (11 * 15, 4 * (15 + 15 + 5 + 15 + 5)),
    ("rmsnorm_bwd", (3, 5), F16): (11 * 15, 2 * (15 + 15 + 5 + 15 + 5)),
    ("rmsnorm_bwd", (3, 5), BF16): (11 * 15, 2 * (15 + 15 + 5 + 15 + 5)),
    # the add, then rmsnorm's 4: 5 per element. Read x, residual [3, 5] and weight; write y
    # and residual_out.
    ("fused_add_rmsnorm", (3, 5), F32): (5 * 15, 4 * (15 + 15 + 5 + 15 + 15)),
    ("fused_add_rmsnorm", (3, 5), F16): (5 * 15, 2 * (15 + 15 + 5 + 15 + 15)),
    ("fused_add_rmsnorm", (3, 5), BF16): (5 * 15, 2 * (15 + 15 + 5 + 15 + 15)),
    # sum, subtract, square and add, two scales, the bias: 7 per element. Read x, weight and
    # bias [5]; write y.
    ("layernorm", (3, 5), F32): (7 * 15, 4 * (15 + 5 + 5 + 15)),
    ("layernorm", (3, 5), F16): (7 * 15, 2 * (15 + 5 + 5 + 15)),
    ("layernorm", (3, 5), BF16): (7 * 15, 2 * (15 + 5 + 5 + 15)),
    # act_and_mul on x [3, 4] (d = 2): about 10 per output; read x, write y [3, 2].
    ("act_and_mul", (3, 4), F32): (10 * 6, 4 * (12 + 6)),
    ("act_and_mul", (3, 4), F16): (10 * 6, 2 * (12 + 6)),
    ("act_and_mul", (3, 4), BF16): (10 * 6, 2 * (12 + 6)),
    # apply_rope on T 3, Hq 2, Hk 1, D 8, R 4: 6 flops a pair, 2 pairs a head, 9 heads; read
    # and write q [3, 2, 8] and k [3, 1, 8], the fp32 cache rows [3, 4] and int64 positions [3].
    ("apply_rope", (3, 2, 1, 8, 4), F32): (6 * 2 * 9, 4 * 2 * 72 + 4 * 12 + 8 * 3),
    ("apply_rope", (3, 2, 1, 8, 4), F16): (6 * 2 * 9, 2 * 2 * 72 + 4 * 12 + 8 * 3),
    ("apply_rope", (3, 2, 1, 8, 4), BF16): (6 * 2 * 9, 2 * 2 * 72 + 4 * 12 + 8 * 3),
    # cross_entropy (the forward, reduction 'none') on logits [3, 5]: max, subtract, exp, add: 4
    # per logit. Read the logits and the int64 targets [3]; write the losses [3].
    ("cross_entropy", (3, 5), F32): (4 * 15, 4 * (15 + 3) + 8 * 3),
    ("cross_entropy", (3, 5), F16): (4 * 15, 2 * (15 + 3) + 8 * 3),
    ("cross_entropy", (3, 5), BF16): (4 * 15, 2 * (15 + 3) + 8 * 3),
    # max, subtract, exp, sum, scale: 5 per element. Read x, write y.
    ("softmax", (3, 5), F32): (5 * 15, 4 * (15 + 15)),
    ("softmax", (3, 5), F16): (5 * 15, 2 * (15 + 15)),
    ("softmax", (3, 5), BF16): (5 * 15, 2 * (15 + 15)),
    # rmsnorm's 4 then softmax's 5 per element; read x and weight, write y.
    ("softmax_rmsnorm", (3, 5), F32): (9 * 15, 4 * (15 + 5 + 15)),
    ("softmax_rmsnorm", (3, 5), F16): (9 * 15, 2 * (15 + 5 + 15)),
    ("softmax_rmsnorm", (3, 5), BF16): (9 * 15, 2 * (15 + 5 + 15)),
    # |x|, max, divide, round: 4 per element. Read x, write q (int8) and 3 fp32 scales.
    ("quantize_int8", (3, 5), F32): (4 * 15, 4 * 15 + 15 + 4 * 3),
    ("quantize_int8", (3, 5), F16): (4 * 15, 2 * 15 + 15 + 4 * 3),
    ("quantize_int8", (3, 5), BF16): (4 * 15, 2 * 15 + 15 + 4 * 3),
    # one multiply per element. Read q (int8) and 3 fp32 scales, write out in the dtype.
    ("dequantize_int8", (3, 5), F32): (15, 15 + 4 * 3 + 4 * 15),
    ("dequantize_int8", (3, 5), F16): (15, 15 + 4 * 3 + 2 * 15),
    ("dequantize_int8", (3, 5), BF16): (15, 15 + 4 * 3 + 2 * 15),
    # quantize_fp8 per 1 x 128 group on x [3, 300]: |x|, max, divide, convert: 4 per element.
    # Read x, write q (a byte an element) and 3 x 3 fp32 scales; per 128 x 128 block on
    # [200, 300]: 2 x 3 scales.
    ("quantize_fp8", (3, 300, 2, 0), F32): (4 * 900, 4 * 900 + 900 + 4 * 9),
    ("quantize_fp8", (3, 300, 2, 0), F16): (4 * 900, 2 * 900 + 900 + 4 * 9),
    ("quantize_fp8", (3, 300, 2, 0), BF16): (4 * 900, 2 * 900 + 900 + 4 * 9),
    ("quantize_fp8", (200, 300, 3, 1), F32): (4 * 60000, 4 * 60000 + 60000 + 4 * 6),
    # dequantize_fp8, per group on [3, 300]: one multiply per element. Read q and 9 scales,
    # write out in the dtype.
    ("dequantize_fp8", (3, 300, 2), F32): (900, 900 + 4 * 9 + 4 * 900),
    ("dequantize_fp8", (3, 300, 2), F16): (900, 900 + 4 * 9 + 2 * 900),
    ("dequantize_fp8", (3, 300, 2), BF16): (900, 900 + 4 * 9 + 2 * 900),
    # rmsnorm_quant, e4m3 per group on x [3, 256]: rmsnorm's 4 and the quantization's ~2 per
    # element. Read x and weight [256]; write q (a byte an element) and 3 x 2 scales.
    ("rmsnorm_quant", (3, 256, 2), F32): (6 * 768, 4 * (768 + 256) + 768 + 4 * 6),
    ("rmsnorm_quant", (3, 256, 2), F16): (6 * 768, 2 * (768 + 256) + 768 + 4 * 6),
    ("rmsnorm_quant", (3, 256, 2), BF16): (6 * 768, 2 * (768 + 256) + 768 + 4 * 6),
    # int8 per token: 3 scales.
    ("rmsnorm_quant", (3, 256, 0), BF16): (6 * 768, 2 * (768 + 256) + 768 + 4 * 3),
    # the add, then rmsnorm_quant's 6. Read x, residual and weight; write residual_out, q and
    # the scales.
    ("fused_add_rmsnorm_quant", (3, 256, 2), F32): (7 * 768, 4 * (3 * 768 + 256) + 768 + 4 * 6),
    ("fused_add_rmsnorm_quant", (3, 256, 2), F16): (7 * 768, 2 * (3 * 768 + 256) + 768 + 4 * 6),
    ("fused_add_rmsnorm_quant", (3, 256, 2), BF16): (7 * 768, 2 * (3 * 768 + 256) + 768 + 4 * 6),
    # act_and_mul_quant on x [3, 512] (d = 256): act_and_mul's 10 and the quantization's 4 per
    # output. Read x, write q [3, 256] (a byte each) and 3 x 2 scales.
    ("act_and_mul_quant", (3, 512, 0), F32): (14 * 768, 4 * 1536 + 768 + 4 * 6),
    ("act_and_mul_quant", (3, 512, 0), F16): (14 * 768, 2 * 1536 + 768 + 4 * 6),
    ("act_and_mul_quant", (3, 512, 0), BF16): (14 * 768, 2 * 1536 + 768 + 4 * 6),
    # top_k on x [3, 5], k 2: one comparison an element; read x, write the values [3, 2] in
    # the dtype and the int64 indices [3, 2].
    ("top_k", (3, 5, 2), F32): (15, 4 * 15 + 4 * 6 + 8 * 6),
    ("top_k", (3, 5, 2), F16): (15, 2 * 15 + 2 * 6 + 8 * 6),
    ("top_k", (3, 5, 2), BF16): (15, 2 * 15 + 2 * 6 + 8 * 6),
    # 2 M N K = 48. fp32 a, b and c.
    ("sgemm", (2, 3, 4), F32): (48, 4 * (8 + 12 + 6)),
    # 16-bit a and b, fp32 c (the default out_dtype, which the bench uses).
    ("wmma_gemm", (2, 3, 4), F16): (48, 2 * (8 + 12) + 4 * 6),
    ("wmma_gemm", (2, 3, 4), BF16): (48, 2 * (8 + 12) + 4 * 6),
    # a, b and c all in the dtype.
    ("gemm", (2, 3, 4), F16): (48, 2 * (8 + 12 + 6)),
    ("gemm", (2, 3, 4), BF16): (48, 2 * (8 + 12 + 6)),
    # int8 a and b, fp32 a_scale [2, 1] and b_scale [1, 3], c in the dtype (the output's).
    ("int8_gemm", (2, 3, 4), F16): (48, 8 + 12 + 4 * (2 + 3) + 2 * 6),
    ("int8_gemm", (2, 3, 4), BF16): (48, 8 + 12 + 4 * (2 + 3) + 2 * 6),
    ("int8_gemm", (2, 3, 4), F32): (48, 8 + 12 + 4 * (2 + 3) + 4 * 6),
    # grouped_gemm (G, M, N, K, masked) = (2, 3, 4, 5, *), every group full (3 rows): 2 x 6
    # rows x N x K. Read a [6, 5] (contiguous; masked [2, 3, 5]) and b [2, 5, 4], write c
    # [6, 4], all in the dtype (the int32 offsets / counts not counted).
    ("grouped_gemm", (2, 3, 4, 5, 0), F16): (2 * 6 * 4 * 5, 2 * (30 + 40 + 24)),
    ("grouped_gemm", (2, 3, 4, 5, 1), BF16): (2 * 6 * 4 * 5, 2 * (30 + 40 + 24)),
    # grouped_gemm_fp8, the same shape with K = 160: fp8 a [6, 160] and b [2, 160, 4], c [6, 4] in
    # the dtype (the output's), fp32 a_scale [6, 2] and b_scale [2, 2, 1].
    ("grouped_gemm_fp8", (2, 3, 4, 160, 0), BF16): (2 * 6 * 4 * 160, 960 + 1280 + 2 * 24 + 4 * (12 + 4)),
    ("grouped_gemm_fp8", (2, 3, 4, 160, 1), F32): (2 * 6 * 4 * 160, 960 + 1280 + 4 * 24 + 4 * (12 + 4)),
    ("grouped_gemm_fp8", (2, 3, 4, 160, 1), F16): (2 * 6 * 4 * 160, 960 + 1280 + 2 * 24 + 4 * (12 + 4)),
    # gemm_fp8 (M, N, K, scaling, kmajor, e5m2): fp8 a [2, 160] and b [160, 3] (a byte an
    # element), c [2, 3] in the dtype (the output's); fp32 scales: tensor 1 + 1, row 2 + 3,
    # block a [2, 2] and b [2, 1] (K = 160: two 128-groups, the last partial).
    ("gemm_fp8", (2, 3, 160, 0, 1, 0), BF16): (2 * 2 * 3 * 160, 320 + 480 + 2 * 6 + 4 * 2),
    ("gemm_fp8", (2, 3, 160, 1, 0, 1), F16): (2 * 2 * 3 * 160, 320 + 480 + 2 * 6 + 4 * 5),
    ("gemm_fp8", (2, 3, 160, 2, 1, 0), F32): (2 * 2 * 3 * 160, 320 + 480 + 4 * 6 + 4 * 6),
    # Q K^T and P V: 2 x 2 x D FLOPs per (query, key) pair the mask leaves, per batch x query
    # head (2 x 4): 3 x 5 pairs, or causal (bottom-right aligned) rows 0, 1, 2 see 3, 4, 5 keys.
    # Read q [2,4,3,8] (192), k and v [2,2,5,8] (160 each), write o (192) and fp32 lse [2,4,3].
    # decode, every sequence full (5 keys), Sq 3 causal: rows see 3, 4, 5 keys, 12 pairs a head
    # of 8 (B x Hq), 4 D flops a pair. Read q [2, 4, 3, 8], K and V [2, 2, 5, 8] and the 2
    # int32 lengths; write o like q and lse [2, 4, 3] (page tables not counted).
    ("flash_attention_decode", (2, 4, 2, 3, 5, 8, 16), F16): (4 * 8 * 8 * 12, 2 * (2 * 192 + 2 * 160) + 4 * 24 + 4 * 2),
    ("flash_attention_decode", (2, 4, 2, 3, 5, 8, 0), BF16): (4 * 8 * 8 * 12, 2 * (2 * 192 + 2 * 160) + 4 * 24 + 4 * 2),
    # varlen: the dense op's counts, every sequence full (B x Sq queries against Sk keys), the
    # page size (8th dim) changes nothing.
    ("flash_attention_varlen_fwd", (2, 4, 2, 3, 5, 8, 0, 0), F16): (4 * 8 * 8 * 15, ATTENTION_BYTES_16),
    ("flash_attention_varlen_fwd", (2, 4, 2, 3, 5, 8, 1, 16), BF16): (4 * 8 * 8 * (3 + 4 + 5), ATTENTION_BYTES_16),
    # merge_state on [3, 2, 8]: per value two weighted products and their sum (and the
    # normalizing multiply): 4. Read v_a, v_b [3, 2, 8] and s_a, s_b [3, 2] (fp32); write v
    # and s.
    ("merge_state", (3, 2, 8), F32): (4 * 48, 4 * (3 * 48) + 4 * (3 * 6)),
    ("merge_state", (3, 2, 8), F16): (4 * 48, 2 * (3 * 48) + 4 * (3 * 6)),
    ("merge_state", (3, 2, 8), BF16): (4 * 48, 2 * (3 * 48) + 4 * (3 * 6)),
    # merge_states on v [3, 2, 4, 8], s [3, 2, 4]: a multiply-add per state and value: 2 x 4
    # x 48. Read v and s; write v [3, 2, 8] and s [3, 2].
    ("merge_states", (3, 2, 4, 8), F32): (2 * 4 * 48, 4 * (4 * 48 + 48) + 4 * (4 * 6 + 6)),
    ("merge_states", (3, 2, 4, 8), F16): (2 * 4 * 48, 2 * (4 * 48 + 48) + 4 * (4 * 6 + 6)),
    ("merge_states", (3, 2, 4, 8), BF16): (2 * 4 * 48, 2 * (4 * 48 + 48) + 4 * (4 * 6 + 6)),
    ("flash_attention_fwd", (2, 4, 2, 3, 5, 8, 0), F16): (4 * 8 * 8 * 15, ATTENTION_BYTES_16),
    ("flash_attention_fwd", (2, 4, 2, 3, 5, 8, 0), BF16): (4 * 8 * 8 * 15, ATTENTION_BYTES_16),
    ("flash_attention_fwd", (2, 4, 2, 3, 5, 8, 1), F16): (4 * 8 * 8 * (3 + 4 + 5), ATTENTION_BYTES_16),
    # Sq = 5 > Sk = 3, causal: rows 0..4 see 0, 0, 1, 2, 3 keys (the first two none, their o
    # still written). q and o [1,1,5,8] (40 each), k and v [1,1,3,8] (24 each), lse [1,1,5].
    ("flash_attention_fwd", (1, 1, 1, 5, 3, 8, 1), BF16): (4 * 8 * (0 + 0 + 1 + 2 + 3),
                                                          2 * (40 + 2 * 24 + 40) + 4 * 5),
    # v of another head dim (Dv = 8, D = 16: the optional 8th dim): Q K^T over D and P V over
    # Dv, 2 x (16 + 8) FLOPs a pair; q [2,4,3,16] (384), k [2,2,5,16] (320), v [2,2,5,8] (160),
    # o [2,4,3,8] (192), lse [2,4,3].
    ("flash_attention_fwd", (2, 4, 2, 3, 5, 16, 0, 8), F16): (2 * 8 * (16 + 8) * 15,
                                                             2 * (384 + 320 + 160 + 192) + 4 * 24),
    # The backward's five matmuls (Q K^T, dO V^T, P^T dO, dS K, dS^T Q): 2 x (3 D + 2 Dv)
    # FLOPs a visible pair, per batch x query head (2 x 4), 15 pairs or causal 3 + 4 + 5. Read
    # q, o, dO [2,4,3,8] (192 each), k, v [2,2,5,8] (160 each) and fp32 lse [2,4,3]; write dq
    # (192), dk and dv (160 each).
    ("flash_attention_bwd", (2, 4, 2, 3, 5, 8, 0), F16): (2 * 8 * 40 * 15, 2 * (4 * 192 + 4 * 160) + 4 * 24),
    ("flash_attention_bwd", (2, 4, 2, 3, 5, 8, 1), BF16): (2 * 8 * 40 * 12, 2 * (4 * 192 + 4 * 160) + 4 * 24),
    # D = 16, Dv = 8: 2 x (48 + 16) a pair; q, dq [2,4,3,16] (384 each), o, dO [2,4,3,8] (192
    # each), k, dk [2,2,5,16] (320 each), v, dv [2,2,5,8] (160 each), lse.
    ("flash_attention_bwd", (2, 4, 2, 3, 5, 16, 0, 8), F16): (2 * 8 * 64 * 15,
                                                             2 * (2 * 384 + 2 * 192 + 2 * 320 + 2 * 160) + 4 * 24),
    # The varlen backward's shape is the dense one's with every sequence full: the same work.
    ("flash_attention_varlen_bwd", (2, 4, 2, 3, 5, 8, 0), F16): (2 * 8 * 40 * 15, 2 * (4 * 192 + 4 * 160) + 4 * 24),
    ("flash_attention_varlen_bwd", (2, 4, 2, 3, 5, 8, 1), BF16): (2 * 8 * 40 * 12,
                                                                 2 * (4 * 192 + 4 * 160) + 4 * 24),
}


@pytest.mark.parametrize("case", list(FORMULAS), ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2]}")
def test_formula_counts_what_the_op_reads_writes_and_computes(case):
    op, shape, dtype = case
    spec = registry.get(op)
    flops, nbytes = FORMULAS[case]
    assert spec.flops(shape) == flops
    assert spec.bytes_moved(shape, dtype) == nbytes
    assert spec.arithmetic_intensity(shape, dtype) == pytest.approx(flops / nbytes)


def test_every_op_and_dtype_has_its_formulas_counted():
    counted = {(op, dtype) for op, _, dtype in FORMULAS}
    missing = [(s.name, dt) for s in registry.ops() for dt in s.dtypes if (s.name, dt) not in counted]
    assert not missing, f"count these by hand in FORMULAS: {missing}"


def test_attention_flops_count_the_pairs_the_mask_leaves():
    """Against a brute-force count of (query i, key j) with j <= i + Sk - Sq when causal."""
    spec = registry.get("flash_attention_fwd")
    for sq in range(7):
        for sk in range(7):
            for causal in (0, 1):
                pairs = sum(1 for i in range(sq) for j in range(sk) if not causal or j <= i + sk - sq)
                assert spec.flops((2, 3, 1, sq, sk, 16, causal)) == 4 * 16 * 2 * 3 * pairs, (sq, sk, causal)


# ---------------------------------------------------------------------------------------------
# The roofline table and plot labels


def _roofline_plot_module():
    return import_tool("roofline_plot")


@pytest.mark.parametrize("variant, backend, label", [
    ("gks.cuda", "cuda", "cuda"),
    ("gks.triton", "triton", "triton"),
    ("gks.cuda[mma.sync]", "cuda", "cuda[mma.sync]"),
    ("gks.cuda[128x256x64_s4_c1]", "cuda", "cuda[128x256x64_s4_c1]"),
    ("torch.compile", None, "torch.compile"),
    ("jax.nn.dot_product_attention", None, "jax.nn.dot_product_attention"),
    ("cuBLAS (torch.matmul)", None, "cuBLAS (torch.matmul)"),
])
def test_roofline_plot_labels(variant, backend, label):
    plot = _roofline_plot_module()
    assert plot.variant_label(variant) == (backend, label)
    assert backend is None or backend in plot.MARKERS  # a config keeps its backend's marker


CELL = re.compile(r"\S+(?: \S+)*")  # cells are two or more spaces apart


def test_roofline_table_columns_hold_long_shapes_and_variants():
    rows = [
        {"op": "flash_attention_fwd", "variant": "gks.cuda", "kind": "gks", "dtype": "bfloat16",
         "shape": [2, 16, 16, 16384, 16384, 128, 1], "median_us": 1.0, "tflops": 512.3},
        {"op": "gemm", "variant": "gks.cuda[128x128x64_s6_c2_pp]", "kind": "gks", "dtype": "float16",
         "shape": [4096, 4096, 4096], "median_us": 1.0, "tflops": 601.0},
        {"op": "rmsnorm", "variant": "gks.triton", "kind": "gks", "dtype": "float32",
         "shape": [65536, 1024], "median_us": 1.0, "tflops": 1.5},
    ]
    placed = roofline.analyse(rows, {"source": "test", **MEASURED})
    placed.append({**placed[-1], "shape": [8, 8],
                   **roofline.place(registry.get("rmsnorm"), (8, 8), "float32", 1.0, None)})
    lines = roofline.analysis_lines(placed)
    header = [(m.group(), m.start(), m.end()) for m in CELL.finditer(lines[0])]
    assert [h for h, _, _ in header] == ["op", "variant", "shape", "dtype", "FLOP/B", "TFLOP/s", "roof",
                                         "bound", "% roof"]
    for r, line in zip(placed, lines[1:]):
        cells = [(m.group(), m.start(), m.end()) for m in CELL.finditer(line)]
        assert len(cells) == len(header), line
        for (name, h_start, h_end), (cell, start, end) in zip(header, cells):
            if name in ("op", "variant", "shape", "dtype"):
                assert start == h_start, (name, line)  # left-aligned under its header
            else:
                assert end == h_end, (name, line)  # right-aligned under its header
        assert cells[1][0] == r["variant"] and cells[2][0] == "x".join(map(str, r["shape"]))
    assert lines[1].split()[-2:] == ["compute", f"{100 * 512.3 / 740:.0f}%"]
    assert lines[-1].split()[-3:] == ["-", "-", "-"]  # no ceilings: roof, bound, % roof


def test_bench_table_shows_config_variants_whole(capsys):
    """rich reads "[looped]" as markup unless escaped; the config row must not pass for the
    heuristic's pick."""
    spec = registry.get("rmsnorm")
    rows = [bench.timed_row(spec, _variant(name, [5.0]), "gks", (8, 8), "float32", "ok", {})
            for name in ("gks.cuda", "gks.cuda[looped]", "gks.cuda[mma.sync]")]
    doc = bench.bench_document(rows, device={}, versions={}, copy_gbps=1000.0, ceilings=None)
    bench.print_table(doc["rows"], 1000.0)
    out = capsys.readouterr().out
    assert "gks.cuda[looped]" in out and "gks.cuda[mma.sync]" in out


def test_torch_compile_peer_starts_each_workload_on_a_fresh_cache(monkeypatch):
    """Dynamo keeps one cache per function; past its recompile limit (8 shape x dtype
    workloads) it runs the function eagerly and the peer's row would time that. Each make()
    (one per workload) must clear the cache before it compiles."""
    import torch

    calls = []
    monkeypatch.setattr(torch.compiler, "reset", lambda: calls.append("reset"))
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append("compile") or fn)
    peer = registry.reference_peer("rmsnorm", compiled=True)
    for _ in range(3):
        peer.make()
    assert calls == ["reset", "compile"] * 3
    calls.clear()
    registry.reference_peer("rmsnorm", compiled=False).make()
    assert calls == []
