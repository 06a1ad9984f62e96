#pragma once
// The backend's own kernels (kernels.cu), launched on a stream; each returns the launch's
// cudaError_t (as int, so that host code needs no CUDA headers to call them).
#include <cstdint>

#include <cuda_runtime_api.h>

namespace shardcast::cuda {

// Memory traffic of `bytes`: reads bytes/2 from `src`, writes bytes/2 to `dst` (16-byte words;
// both buffers at least bytes/2 long). An elementwise op's HBM bytes as one streaming kernel.
int launchTraffic(const void* src, void* dst, int64_t bytes, cudaStream_t stream);

// One fused AdamW step over `n` fp32 elements (PyTorch's AdamW update with decoupled weight decay,
// torch/optim/adamw.py): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + lr wd p. Reads p, g, m, v and writes
// p, m, v: 7 fp32 tensors, 28 bytes per element.
int launchAdam(float* p, const float* g, float* m, float* v, int64_t n, int32_t step, cudaStream_t stream);

// Fills `bytes` of `ptr` with the 32-bit word `pattern` repeated (bytes a multiple of 4); the last
// bytes % 4 bytes are left as they are.
int launchFill(void* ptr, int64_t bytes, uint32_t pattern, cudaStream_t stream);

// Fills `bytes` of `ptr` with pseudo-random bf16 halves of magnitude 2^-7 .. 2 (random sign and
// mantissa; every 4-byte word is also a finite fp32, every half a finite fp16), a function of the
// seed and the position. Tensor cores run measurably faster on constant or zero operands than on
// real data (less switching), so what is timed as real work is filled with this.
int launchFillRandom(void* ptr, int64_t bytes, uint64_t seed, cudaStream_t stream);

// Pipeline P2P verify data: byte i of `ptr` becomes (i x stride + seed) mod 256
// (core/base/verify_data.hpp: p2pByte with kP2PByteStride and p2pSeed).
int launchP2PBytes(void* ptr, int64_t bytes, uint32_t seed, int64_t stride, cudaStream_t stream);

}  // namespace shardcast::cuda
