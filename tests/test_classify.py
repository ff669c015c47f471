"""Kernel class and precision from real kernel names (from the test fixtures, except the NCCL
name and the library-shaped names of test_library_precision_tokens)."""
from __future__ import annotations

import pandas as pd
import pytest

from nsightlab.classify import CLASSES, PRECISIONS, annotate, classify_names, kernel_class, precision

CASES = [
    # name (from a fixture), class, precision, confidence
    ("nvjet_sm90_hsh_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm", "fp16", "high"),
    ("nvjet_sm90_qqhsh_128x128_128x6_2x1_v_bz_coopA_algo2_bias_TNT", "gemm", "fp8", "high"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "gemm", "tf32", "high"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     "attention", "fp16", "high"),
    ("trt_turing_h1688cudnn_128x128_ldg8_relu_exp_interior_nhwc_linkable_tn_v1", "conv", "fp16", "high"),
    ("sm75_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize256x32x32_stage1_warpsize4x1x1_g1_tensor16x8x8_t1r3s3_execute_kernel_trt",
     "conv", "fp16", "high"),
    ("sm50_xmma_cublas_gemvx_f16f16_f32_f32_nn_n_int32_unit_n_launch_param64x8x8_strided_unit_stride_execute_kernel_trt",
     "gemm", "fp16", "high"),
    ("void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::Half, float, (bool)0>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
     "norm", "fp16", "medium"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::float8_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)",
     "quantize", "fp8", "high"),
    ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::float16_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)",
     "quantize", "fp16", "high"),
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t<c10::Half, at::native::MaxNanFunctor<c10::Half>>, unsigned int, c10::Half, (int)4, (int)4>>(T3)",
     "reduce", "fp16", "medium"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AbsFunctor<float>, std::array<char *, (unsigned long)2>>(int, T2, T3)",
     "elementwise", "fp32", "medium"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>, (int)4, TrivialOffsetCalculator<(int)1, unsigned int>, TrivialOffsetCalculator<(int)1, unsigned int>, at::native::memory::LoadWithCast<(int)1>, at::native::memory::StoreWithCast<(int)1>>(int, T1, T2, T3, T4, T5, T6)",
     "reformat/copy", "fp32", "medium"),
    ("void genericReformat::copyPackedKernel<__half, __half, (bool)1, (bool)1, genericReformat::IdentityCoordMapper<(int)4>, (int)4>(unsigned int, unsigned int, const void *, genericReformat::ArrayN<T6>, genericReformat::ArrayNWithReducedDivisors<T6>, genericReformat::ArrayN<T6>, int, int, int, const float *, void *, genericReformat::ArrayN<T6>, genericReformat::ArrayNWithReducedDivisors<T6>, genericReformat::ArrayNWithReducedDivisors<T6>, genericReformat::ArrayN<T6>, int, int, int, const float *, int)",
     "reformat/copy", "fp16", "medium"),
    ("void cuInt8::nhwcTonchw<__half, (int)32, (int)4, (int)2>(const __half *, T1 *, int, int, int, int, int, int)",
     "reformat/copy", "fp16", "medium"),
    ("<unnamed>::nvfuser_inner_persistent_f0_c1_r0_g2(<unnamed>::Tensor<float, (int)3, (int)3>, <unnamed>::Tensor<float, (int)2, (int)2>)",
     "reduce", "fp32", "medium"),
    ("generatedNativePointwise", "elementwise", "unknown", "none"),
    ("saxpy(double *, double *, double *, double, int)", "other", "fp64", "medium"),
    ("void cask_trt::computeOffsetsKernel<(bool)0, (bool)0>(cask_trt::ComputeOffsetsParams)", "other", "unknown", "none"),
    ("[CUDA memset]", "memset", "unknown", "none"),
    ("[CUDA memcpy Host-to-Device]", "reformat/copy", "unknown", "none"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)", "communication", "fp32", "high"),
]


@pytest.mark.parametrize("name,cls,prec,conf", CASES, ids=[c[0][:40] for c in CASES])
def test_real_kernel_names(name, cls, prec, conf):
    assert kernel_class(name) == cls
    assert precision(name) == (prec, conf)


@pytest.mark.parametrize("name,prec", [
    ("cutlass3x_sm90_tensorop_gemm_e4m3_e4m3_f32_f16_f16_128x128x128_1x1x1_0_tnn_align16_warpspecialized", "fp8"),
    ("cutlass3x_sm100_bstensorop_gemm_ue4m3xe2m1_ue4m3xe2m1_f32_bf16_bf16_128x128x256_1x1x1_0_tnn", "nvfp4"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "bf16"),
    ("ampere_int8_i8816gemm_int8_128x128_ldg16_relu_nn", "int8"),
    ("sm100_mxf8f6f4_gemm_mxf8_mxf8_bf16", "mxfp8"),
])
def test_library_precision_tokens(name, prec):
    """Names in the shape cuBLAS/CUTLASS/TensorRT give them (not in the fixtures)."""
    assert precision(name)[0] == prec
    assert kernel_class(name) == "gemm"


def test_vocabularies_and_annotate_on_categoricals():
    df = pd.DataFrame({"name": pd.Categorical([c[0] for c in CASES] * 3), "x": range(3 * len(CASES))})
    out = annotate(df)
    assert list(out["kernel_class"].astype(str)) == [c[1] for c in CASES] * 3
    assert list(out["precision"].astype(str)) == [c[2] for c in CASES] * 3
    assert set(out["kernel_class"].astype(str)) <= set(CLASSES)
    assert set(classify_names(df["name"])["precision"]) <= set(PRECISIONS)
