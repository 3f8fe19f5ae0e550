# SPDX-License-Identifier: Apache-2.0
"""tools/dump_sass.py's op -> kernel mapping and tools/dump_triton_ir.py's argument checks.
None needs a GPU; the tests that read the built library skip where it is not built."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TOOLS, import_tool
from gks import registry

dump_sass = import_tool("dump_sass")
dump_triton_ir = import_tool("dump_triton_ir")

# Demangled kernel names as c++filt prints them for the built library (sm_80 and sm_90a),
# a few per op, with the instances that a name alone would give to the wrong op: the
# row-op skeleton's kernels, which serve every row op (the functor tells which), and the
# Hopper GEMM's, which serve gemm and int8_gemm (the operand type tells which).
R = "gks::kernels::rows::"
G = "gks::kernels::gemm::"
S = "gks::kernels::gemm::sm90::"
A = "gks::kernels::attention::"
D = "gks::detail::(anonymous namespace)::"
KERNELS = {
    "rmsnorm": [
        f"void {R}looped_kernel<{R}RmsNormRow<__half, 1, false>, "
         f"{R}Looped<1024> >({R}RmsNormRow<__half, 1, false>::Params)",
        f"void {R}looped_kernel<{R}RmsNormRow<float, 4, false>, "
         f"{R}Looped<512> >({R}RmsNormRow<float, 4, false>::Params)",
        f"void {R}registers_kernel<{R}RmsNormRow<__half, 1, false>, {R}Registers<1024, 2, 1, "
         f"1> >({R}RmsNormRow<__half, 1, false>::Params)",
        f"void {R}registers_kernel<{R}RmsNormRow<float, 4, false>, {R}Registers<64, 8, 1, "
         f"1> >({R}RmsNormRow<float, 4, false>::Params)",
    ],
    "rmsnorm_bwd": [
        f"void {R}looped_kernel<{R}RmsNormBwdRow<__nv_bfloat16, 8>, "
         f"{R}Looped<1024> >({R}RmsNormBwdRow<__nv_bfloat16, 8>::Params)",
        f"void {R}registers_kernel<{R}RmsNormBwdRow<float, 4>, {R}Registers<256, 4, 1, "
         f"1> >({R}RmsNormBwdRow<float, 4>::Params)",
        f"void {R}rmsnorm_bwd_dweight_kernel<__half>(float const*, long, long, __half*)",
    ],
    "act_and_mul": [
        f"void {R}looped_kernel<{R}ActAndMulRow<__nv_bfloat16, 8, 0>, "
         f"{R}Looped<1024> >({R}ActAndMulRow<__nv_bfloat16, 8, 0>::Params)",
        f"void {R}looped_kernel<{R}ActAndMulRow<float, 1, 2>, "
         f"{R}Looped<128> >({R}ActAndMulRow<float, 1, 2>::Params)",
    ],
    "apply_rope": [
        f"void {R}looped_kernel<{R}RopeRow<__half, 8, true>, "
         f"{R}Looped<256> >({R}RopeRow<__half, 8, true>::Params)",
        f"void {R}looped_kernel<{R}RopeRow<float, 1, false>, "
         f"{R}Looped<128> >({R}RopeRow<float, 1, false>::Params)",
    ],
    "cross_entropy": [
        f"void {R}looped_kernel<{R}CrossEntropyRow<__nv_bfloat16, 8, false>, "
         f"{R}Looped<512> >({R}CrossEntropyRow<__nv_bfloat16, 8, false>::Params)",
        f"void {R}looped_kernel<{R}CrossEntropyRow<__half, 8, true>, "
         f"{R}Looped<256> >({R}CrossEntropyRow<__half, 8, true>::Params)",
        f"void {R}registers_kernel<{R}CrossEntropyRow<float, 1, true>, {R}Registers<32, 4, 4, "
         f"1> >({R}CrossEntropyRow<float, 1, true>::Params)",
    ],
    "layernorm": [
        f"void {R}looped_kernel<{R}LayerNormRow<float, 4, true>, "
         f"{R}Looped<512> >({R}LayerNormRow<float, 4, true>::Params)",
        f"void {R}registers_kernel<{R}LayerNormRow<__nv_bfloat16, 8, false>, {R}Registers<256, 4, 1, "
         f"2> >({R}LayerNormRow<__nv_bfloat16, 8, false>::Params)",
    ],
    "fused_add_rmsnorm": [
        f"void {R}looped_kernel<{R}RmsNormRow<__nv_bfloat16, 8, true>, "
         f"{R}Looped<1024> >({R}RmsNormRow<__nv_bfloat16, 8, true>::Params)",
        f"void {R}registers_kernel<{R}RmsNormRow<__half, 1, true>, {R}Registers<1024, 2, 1, "
         f"1> >({R}RmsNormRow<__half, 1, true>::Params)",
    ],
    "softmax": [
        f"void {R}looped_kernel<{R}SoftmaxRow<__half, 1, false>, "
         f"{R}Looped<512> >({R}SoftmaxRow<__half, 1, false>::Params)",
        f"void {R}looped_kernel<{R}SoftmaxRow<float, 4, false>, "
         f"{R}Looped<512> >({R}SoftmaxRow<float, 4, false>::Params)",
        f"void {R}registers_kernel<{R}SoftmaxRow<__half, 1, false>, {R}Registers<128, 8, "
         f"1, 1> >({R}SoftmaxRow<__half, 1, false>::Params)",
        f"void {R}registers_kernel<{R}SoftmaxRow<float, 4, true>, {R}Registers<64, 8, 1, "
         f"1> >({R}SoftmaxRow<float, 4, true>::Params)",
    ],
    "softmax_rmsnorm": [
        f"void {R}looped_kernel<{R}SoftmaxRmsNormRow<__half, 1, false>, "
         f"{R}Looped<512> >({R}SoftmaxRmsNormRow<__half, 1, false>::Params)",
        f"void {R}looped_kernel<{R}SoftmaxRmsNormRow<float, 4, false>, "
         f"{R}Looped<512> >({R}SoftmaxRmsNormRow<float, 4, false>::Params)",
        f"void {R}registers_kernel<{R}SoftmaxRmsNormRow<__half, 1, false>, "
         f"{R}Registers<128, 8, 1, 1> >({R}SoftmaxRmsNormRow<__half, 1, false>::Params)",
        f"void {R}registers_kernel<{R}SoftmaxRmsNormRow<__nv_bfloat16, 8, true>, "
         f"{R}Registers<1024, 2, 1, 1> >({R}SoftmaxRmsNormRow<__nv_bfloat16, 8, "
         f"true>::Params)",
        f"void {R}softmax_rmsnorm_staged_kernel<__half, 8, 1024, 4, 1, "
         f"0>({R}SoftmaxParams)",
        f"void {R}softmax_rmsnorm_staged_kernel<float, 4, 1024, 8, 1, 4>({R}SoftmaxParams)",
    ],
    "quantize_int8": [
        f"void {R}looped_kernel<{R}QuantizeRow<__half, 16>, "
         f"{R}Looped<512> >({R}QuantizeRow<__half, 16>::Params)",
        f"void {R}looped_kernel<{R}QuantizeRow<float, 1>, "
         f"{R}Looped<512> >({R}QuantizeRow<float, 1>::Params)",
        f"void {R}registers_kernel<{R}QuantizeRow<__half, 16>, {R}Registers<128, 4, 1, "
         f"1> >({R}QuantizeRow<__half, 16>::Params)",
        f"void {R}registers_kernel<{R}QuantizeRow<float, 1>, {R}Registers<64, 8, 1, "
         f"1> >({R}QuantizeRow<float, 1>::Params)",
    ],
    "dequantize_int8": [
        f"void {R}tiled_kernel<{R}DequantizeRow<__half, 1>, {R}Tiled<128, 2, "
         f"1> >({R}DequantizeRow<__half, 1>::Params)",
        f"void {R}tiled_kernel<{R}DequantizeRow<float, 4>, {R}Tiled<64, 4, "
         f"2> >({R}DequantizeRow<float, 4>::Params)",
    ],
    "quantize_fp8": [
        f"void {R}registers_kernel<{R}QuantizeFp8TokenRow<__nv_bfloat16, 16>, {R}Registers<128, 4, 1, "
         f"1> >({R}QuantizeFp8TokenRow<__nv_bfloat16, 16>::Params)",
        f"void {R}tiled_kernel<{R}QuantizeFp8GroupRow<float, true, false>, {R}Tiled<256, 1, "
         f"2> >({R}QuantizeFp8GroupRow<float, true, false>::Params)",
        f"void {R}tiled_kernel<{R}QuantizeFp8BlockTile<__half, false>, {R}Tiled<256, 1, "
         f"4> >({R}QuantizeFp8BlockTile<__half, false>::Params)",
        f"void {R}fp8_tensor_absmax_kernel<__nv_bfloat16, true>({R}QuantizeFp8Params)",
    ],
    "dequantize_fp8": [
        f"void {R}tiled_kernel<{R}DequantizeFp8Row<__nv_bfloat16, 8>, {R}Tiled<64, 4, "
         f"2> >({R}DequantizeFp8Row<__nv_bfloat16, 8>::Params)",
    ],
    "rmsnorm_quant": [
        f"void {R}registers_kernel<{R}RmsNormQuantRow<__nv_bfloat16, 8, false, {R}QuantOutFp8Group>, "
         f"{R}Registers<128, 4, 1, 1> >({R}RmsNormQuantRow<__nv_bfloat16, 8, false, {R}QuantOutFp8Group>::Params)",
        f"void {R}registers_kernel<{R}RmsNormQuantRow<float, 1, false, {R}QuantOutToken<true> >, "
         f"{R}Registers<32, 2, 4, 1> >({R}RmsNormQuantRow<float, 1, false, {R}QuantOutToken<true> >::Params)",
    ],
    "fused_add_rmsnorm_quant": [
        f"void {R}registers_kernel<{R}RmsNormQuantRow<__half, 8, true, {R}QuantOutToken<false> >, "
         f"{R}Registers<256, 4, 1, 1> >({R}RmsNormQuantRow<__half, 8, true, {R}QuantOutToken<false> >::Params)",
    ],
    "act_and_mul_quant": [
        f"void {R}looped_kernel<{R}ActAndMulQuantRow<__nv_bfloat16, 8, 0>, {R}Looped<256> "
         f">({R}ActAndMulQuantRow<__nv_bfloat16, 8, 0>::Params)",
    ],
    "top_k": [
        f"void {R}topk_kernel<float, 1024, 8, true>({R}TopKParams)",
        f"void {R}topk_kernel<__nv_bfloat16, 256, 1, false>({R}TopKParams)",
    ],
    "sgemm": [
        f"void {G}sgemm_kernel<{D}Sgemm128x128, false>({G}SgemmParams)",
        f"void {G}sgemm_kernel<{D}Sgemm64x64, true>({G}SgemmParams)",
    ],
    "wmma_gemm": [
        f"void {G}wmma_gemm_kernel<__half, {D}Wmma128x128x32, false>({G}WmmaGemmParams)",
        f"void {G}wmma_gemm_kernel<__nv_bfloat16, {D}Wmma64x64x32, "
         f"true>({G}WmmaGemmParams)",
    ],
    "gemm": [
        f"void {S}gemm_kernel<{S}Mainloop<{S}HalfOperands<__half>, {S}Tile<128, 128, 6, "
         f"1, false, 1> >, {S}Epilogue<{S}Fused>, "
         f"{S}PersistentScheduler<false> >(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, "
         f"{S}Params)",
        f"void {S}split_k_reduce_kernel<{S}HalfOperands<__half>, {S}Fused>({S}Params)",
    ],
    "int8_gemm": [
        f"void {G}int8_gemm_kernel<{D}Int8_128x128x128, false>({G}Int8GemmParams)",
        f"void {S}gemm_kernel<{S}Mainloop<{S}ByteOperands<signed char, false>, {S}Tile<128, 128, 6, 1, "
         f"false, 1> >, {S}Epilogue<{S}Fused>, "
         f"{S}PersistentScheduler<false> >(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, "
         f"{S}Params)",
        f"void {S}split_k_reduce_kernel<{S}ByteOperands<signed char, false>, {S}Fused>({S}Params)",
        f"{G}transpose_bytes_kernel({G}TransposeBytesParams)",
    ],
    "grouped_gemm": [
        f"void {S}gemm_kernel<{S}Mainloop<{S}HalfOperands<__nv_bfloat16>, {S}Tile<128, 128, 5, 1, "
         f"false, 1> >, {S}Epilogue<{S}NoScales>, "
         f"{S}GroupedScheduler<128> >(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, {S}Params)",
        "void gks::detail::(anonymous namespace)::pack_rows_kernel<unsigned short>(unsigned short const*, long, "
        "long, unsigned short*, long, long, long, long)",
    ],
    "grouped_gemm_fp8": [
        f"void {S}gemm_kernel<{S}Mainloop<{S}ByteOperands<__nv_fp8_e4m3, true>, {S}Tile<128, 128, 5, 1, "
         f"false, 1> >, {S}Epilogue<{S}NoScales>, "
         f"{S}GroupedScheduler<128> >(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, {S}Params)",
        "void gks::detail::(anonymous namespace)::pack_rows_kernel<unsigned char>(unsigned char const*, long, "
        "long, unsigned char*, long, long, long, long)",
    ],
    "gemm_fp8": [
        f"void {S}gemm_kernel<{S}Mainloop<{S}ByteOperands<__nv_fp8_e4m3, true>, {S}Tile<128, 128, 6, 1, "
         f"false, 1> >, {S}Epilogue<{S}Fused>, "
         f"{S}PersistentScheduler<false> >(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, "
         f"{S}Params)",
        f"void {S}split_k_reduce_kernel<{S}ByteOperands<__nv_fp8_e5m2, true>, {S}Fused>({S}Params)",
    ],
    "flash_attention_decode": [
        f"void {A}flash_attention_decode_kernel<__half, {A}DecodeTile<128, 1>, true>({A}DecodeParams)",
        f"void {A}flash_attention_decode_kernel<__nv_bfloat16, {A}DecodeTile<64, 4>, false>({A}DecodeParams)",
        f"void {A}merge_partials_kernel<__nv_bfloat16, 4, 32>({A}MergeStateParams)",
    ],
    "merge_state": [
        f"void {A}merge_state_kernel<__half, 8, 16, false>({A}MergeStateParams)",
        f"void {A}merge_state_kernel<float, 1, 4, false>({A}MergeStateParams)",
    ],
    "merge_states": [
        f"void {A}merge_state_kernel<__nv_bfloat16, 8, 32, true>({A}MergeStateParams)",
    ],
    # The mma.sync and wgmma kernels' last template argument is kVarlen.
    "flash_attention_fwd": [
        f"void {A}flash_attention_fwd_kernel<__half, {A}FlashFwdTile<128, 128, 64, 4, "
         f"false, false>, ({A}Mask)0, false>({A}FwdParams)",
        f"void {A}flash_attention_fwd_kernel<__nv_bfloat16, {A}FlashFwdTile<96, 128, 64, "
         f"4, false, false>, ({A}Mask)1, false>({A}FwdParams)",
        f"void {A}flash_attention_fwd_wgmma_kernel<__half, {A}sm90::Tile<128, 64, 2>, "
         f"({A}Mask)0, false>({A}FwdParams)",
        f"void {A}ws::flash_attention_fwd_ws_kernel<__half, {A}ws::Tile<128, 128, 2>, "
         f"({A}Mask)1>(CUtensorMap_st, CUtensorMap_st, {A}FwdParams, {A}ws::Schedule)",
    ],
    "flash_attention_bwd": [
        f"void {A}flash_attention_bwd_delta_kernel<__half, 64, false>({A}BwdParams)",
        f"void {A}flash_attention_bwd_dkdv_kernel<__nv_bfloat16, {A}FlashBwdTile<128, 128>, ({A}Mask)1, "
         f"({A}DkDv)0, false>({A}BwdParams)",
        f"void {A}flash_attention_bwd_dq_kernel<__half, {A}FlashBwdTile<192, 128>, ({A}Mask)2, false>({A}BwdParams)",
        f"void {A}flash_attention_bwd_wgmma_kernel<__nv_bfloat16, {A}FlashBwdWgmmaTile<128>, ({A}Mask)1>({A}BwdParams)",
        f"void {A}flash_attention_bwd_dq_convert_kernel<__half, {A}FlashBwdWgmmaTile<64> >({A}BwdParams)",
        f"void {A}bwd_ws::flash_attention_bwd_ws_kernel<__nv_bfloat16, {A}bwd_ws::Tile<128>, ({A}Mask)2>"
         f"(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, {A}BwdParams)",
    ],
    "flash_attention_varlen_bwd": [
        f"void {A}flash_attention_bwd_delta_kernel<__nv_bfloat16, 128, true>({A}BwdParams)",
        f"void {A}flash_attention_bwd_dkdv_kernel<__half, {A}FlashBwdTile<256, 256>, ({A}Mask)0, "
         f"({A}DkDv)2, true>({A}BwdParams)",
        f"void {A}flash_attention_bwd_dq_kernel<__nv_bfloat16, {A}FlashBwdTile<64, 64>, ({A}Mask)1, true>({A}BwdParams)",
    ],
    "flash_attention_varlen_fwd": [
        f"void {A}flash_attention_fwd_kernel<__half, {A}FlashFwdTile<128, 128, 64, 4, "
         f"false, false>, ({A}Mask)1, true>({A}FwdParams)",
        f"void {A}flash_attention_fwd_wgmma_kernel<__nv_bfloat16, {A}sm90::Tile<64, 128, "
         f"2>, ({A}Mask)2, true>({A}FwdParams)",
    ],
}
ALL = [name for names in KERNELS.values() for name in names]


def test_dump_sass_parses_template_arguments():
    assert dump_sass.parse_kernel(KERNELS["softmax_rmsnorm"][0]) == (
        "looped_kernel", ("SoftmaxRmsNormRow<__half, 1, false>", "Looped<512>"))
    assert dump_sass.parse_kernel(KERNELS["wmma_gemm"][0])[1][1] == "Wmma128x128x32"
    assert dump_sass.parse_kernel(KERNELS["int8_gemm"][-1]) == ("transpose_bytes_kernel", ())


def test_every_cuda_op_names_its_kernels():
    cuda_ops = {s.name for s in registry.ops() if s.has_backend("cuda")}
    assert set(dump_sass._op_patterns()) == cuda_ops == set(KERNELS)


@pytest.mark.parametrize("op", sorted(KERNELS))
def test_dump_sass_selects_exactly_the_ops_kernels(op):
    assert sorted(dump_sass.select_kernels(op, ALL)) == sorted(KERNELS[op])


def test_dump_sass_falls_back_to_a_substring():
    assert dump_sass.select_kernels("split_k", ALL) == [n for n in ALL if "split_k_reduce_kernel" in n]
    assert len(dump_sass.select_kernels("split_k", ALL)) == 3
    assert dump_sass.select_kernels("ByteOperands<signed char", ALL) == KERNELS["int8_gemm"][1:3]
    assert dump_sass.select_kernels("no_such_kernel", ALL) == []


@pytest.fixture
def fake_library(monkeypatch):
    """dump_sass.main over the fixture names, with nothing run: a --kernel or --arch error
    must come from the listing alone, before any SASS is dumped."""
    resources = {(arch, name): {"REG": 32} for name in ALL for arch in ("sm_80", "sm_90a")}
    monkeypatch.setattr(dump_sass, "find_cuobjdump", lambda: "cuobjdump")
    monkeypatch.setattr(dump_sass, "list_kernels", lambda tool, lib: (resources, {n: n for n in ALL}))

    def no_run(*args, **kwargs):
        raise AssertionError(f"ran {args[0]}")

    monkeypatch.setattr(dump_sass.subprocess, "run", no_run)


@pytest.mark.parametrize("argv, message", [
    (["--kernel", "nonsense"], "argument --kernel: 'nonsense' is not a registry op"),
    (["--kernel", "rmsnorm", "--arch", "sm_100"], "argument --arch: no selected kernel is built for sm_100"),
])
def test_dump_sass_refuses_a_kernel_or_arch_that_matches_nothing(fake_library, capsys, argv, message):
    if argv[1] in dump_sass._op_patterns() and not shutil.which("c++filt"):
        pytest.skip("--kernel OP needs c++filt")
    with pytest.raises(SystemExit) as exit_:
        dump_sass.main(["--lib", "libfake.so", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_dump_sass_names_an_op_missing_from_the_library(monkeypatch, capsys):
    """A library built without sm_90a has none of gemm's kernels: said so, by name."""
    if not shutil.which("c++filt"):
        pytest.skip("--kernel OP needs c++filt")
    names = [n for n in ALL if n not in KERNELS["gemm"]]
    monkeypatch.setattr(dump_sass, "find_cuobjdump", lambda: "cuobjdump")
    monkeypatch.setattr(dump_sass, "list_kernels",
                        lambda tool, lib: ({("sm_80", n): {} for n in names}, {n: n for n in names}))
    with pytest.raises(SystemExit) as exit_:
        dump_sass.main(["--lib", "libfake.so", "--kernel", "gemm"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "op 'gemm' has no kernels in libfake.so (its kernels match: " in err


def _built_library() -> Path:
    from gks import _native

    lib = _native.library_path()
    if lib is None or not lib.is_file():
        pytest.skip("the gks CUDA library is not built")
    if not shutil.which("c++filt"):
        pytest.skip("needs c++filt to demangle the kernel names")
    return lib


def test_dump_sass_gives_each_built_kernel_to_one_op():
    """On the built library: every kernel has an op (a new kernel template needs a rule in
    its spec's sass_kernels), and, with sm_90a built, every op has kernels."""
    lib = _built_library()
    resources, names = dump_sass.list_kernels(dump_sass.find_cuobjdump(), lib)
    ops = {name: dump_sass.op_of(name) for name in names.values()}
    assert ops and not [name for name, op in ops.items() if op is None]
    if any(arch == "sm_90a" for arch, _ in resources):
        assert set(ops.values()) == set(dump_sass._op_patterns())


def test_dump_sass_cli_on_the_built_library():
    lib = _built_library()
    tool = [sys.executable, str(TOOLS / "dump_sass.py"), "--lib", str(lib)]
    out = subprocess.run(tool + ["--kernel", "no_such_kernel"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "'no_such_kernel' is not a registry op" in out.stderr, out.stderr
    # A substring (not an op) with few kernels: its SASS alone is dumped, in seconds.
    out = subprocess.run(tool + ["--kernel", "transpose_bytes"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "transpose_bytes_kernel" in out.stdout and "LDG.128" in out.stdout


def _triton_ir_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        dump_triton_ir.main(list(argv))
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--kernel", "gemm"], "argument --kernel: op 'gemm' has no Triton backend (it has: cuda)"),
    (["--kernel", "no_such_op"], "argument --kernel: unknown op 'no_such_op' (ops with a Triton backend: "),
    (["--kernel", "sgemm", "--dtype", "float16"], "argument --dtype: sgemm takes float32, not 'float16'"),
    (["--kernel", "wmma_gemm", "--dtype", "float32"], "argument --dtype: wmma_gemm takes float16, bfloat16"),
    (["--kernel", "rmsnorm", "--shape", "4x"], "argument --shape: rmsnorm takes 2 sizes, MxN"),
    (["--kernel", "rmsnorm", "--shape", "4x256x2"], "argument --shape: rmsnorm takes 2 sizes, MxN"),
    (["--kernel", "sgemm", "--shape", "64x-64x64"], "argument --shape: sgemm takes 3 sizes, MxNxK"),
])
def test_dump_triton_ir_refuses_bad_arguments_before_running(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(dump_triton_ir, "capture", lambda *a: pytest.fail("captured"))
    monkeypatch.setattr(dump_triton_ir, "compile_and_write", lambda *a: pytest.fail("compiled"))
    monkeypatch.setattr(dump_triton_ir.subprocess, "run", lambda *a, **k: pytest.fail("ran a subprocess"))
    assert message in _triton_ir_error(capsys, *argv)


def test_dump_triton_ir_cli_exits_2_for_an_op_without_triton():
    out = subprocess.run([sys.executable, str(TOOLS / "dump_triton_ir.py"), "--kernel", "gemm"],
                         capture_output=True, text=True, cwd=TOOLS.parent, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "op 'gemm' has no Triton backend" in out.stderr


def test_dump_triton_ir_defaults_follow_the_spec():
    """--dtype: float16 where the op takes it, else its first; --shape: as the help says, the
    last test shape with no size 0 and none above 4096."""
    import argparse

    p = argparse.ArgumentParser()
    for op, dtype in (("sgemm", "float32"), ("rmsnorm", "float16"), ("int8_gemm", "float16")):
        spec = registry.get(op)
        shape = [s for s in spec.test_shapes if all(s) and max(s) <= 4096][-1]
        args = argparse.Namespace(kernel=op, dtype=None, shape=None)
        assert dump_triton_ir.resolve(p, args) == (dtype, shape)
    args = argparse.Namespace(kernel="rmsnorm", dtype="bfloat16", shape="4x256")
    assert dump_triton_ir.resolve(p, args) == ("bfloat16", (4, 256))
