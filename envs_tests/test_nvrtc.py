"""NVRTC compilation: CUBIN without a GPU, diagnostics mapped to lines, ptxas resources, the cache."""

from leap_gym.backends.nvrtc import compile_cuda, parse_ptxas

GOOD = '''#include <cuda_fp16.h>
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    __shared__ float buf[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, buf[0]);
}
'''


def test_compiles_to_cubin_with_resources():
    result = compile_cuda(GOOD, "sm_90", use_disk_cache=False)
    assert result.ok, result.log
    assert result.cubin[:4] == b"\x7fELF"
    res = result.resources["block_sum"]
    assert res.registers > 0 and res.shared_mem_bytes == 1024 and res.spill_stores_bytes == 0


def test_syntax_error_names_and_quotes_the_line():
    bad = GOOD.replace("buf[threadIdx.x] = i < n ? x[i] : 0.0f;", "buf[threadIdx.x] = i < n ? x[i] : 0.0f")
    result = compile_cuda(bad, use_disk_cache=False)
    assert not result.ok and not result.cubin
    error = result.errors[0]
    assert error.line in (5, 6) and "expected" in error.message
    assert error.source_line is not None


def test_undefined_identifier_quotes_the_offending_line():
    result = compile_cuda(GOOD.replace("atomicAdd(out, buf[0])", "atomicAdd(out, bufx[0])"), use_disk_cache=False)
    assert not result.ok
    assert result.errors[0].line == 11 and "bufx" in result.errors[0].source_line
    assert "undefined" in result.errors[0].message


def test_other_architectures_and_cache_hits():
    first = compile_cuda(GOOD, "sm_80")
    again = compile_cuda(GOOD, "sm_80")
    assert first.ok and again.cached and again.cubin == first.cubin
    assert not compile_cuda(GOOD, "sm_90").cubin == first.cubin


def test_ptxas_parser_reads_spills():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem"""
    res = parse_ptxas(log)["k"]
    assert (res.registers, res.shared_mem_bytes, res.spill_stores_bytes, res.spill_loads_bytes) == (255, 4096, 8, 12)


def test_failures_without_a_source_line_are_not_cached():
    # An unknown option fails the whole compilation, as a missing library would: nothing is cached.
    first = compile_cuda(GOOD, "sm_90", options=("--no-such-option",))
    again = compile_cuda(GOOD, "sm_90", options=("--no-such-option",))
    assert not first.ok and not again.cached
