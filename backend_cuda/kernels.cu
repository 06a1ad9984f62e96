#include "backend_cuda/kernels.hpp"

#include <cuda_runtime.h>

namespace shardcast::cuda {
namespace {

constexpr int kThreads = 256;

int blocksFor(int64_t n) {
    // A grid-stride loop: enough blocks to fill any current GPU, capped.
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

__global__ void trafficKernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t words) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
        uint4 w = src[i];
        w.x += 1u;  // a dependency on the read, so the copy is not a plain memcpy the compiler may fold
        dst[i] = w;
    }
}

__global__ void adamKernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                           float* __restrict__ v, int64_t n, float lr, float b1, float b2, float eps, float wd,
                           float bias1, float bias2) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gi = g[i];
        const float mi = b1 * m[i] + (1.0f - b1) * gi;
        const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float pi = p[i];
        p[i] = pi - lr * wd * pi - lr * (mi / bias1) / (sqrtf(vi / bias2) + eps);
    }
}

__global__ void fillKernel(uint32_t* ptr, int64_t words, uint32_t pattern) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) ptr[i] = pattern;
}

// Pseudo-random bf16 halves (splitmix64's finaliser of the half's index and the seed): a random
// sign and mantissa and an exponent of 2^-7 .. 2^0, so each 32-bit word also reads as a finite fp32
// (its high half a bf16) and each half as a finite fp16. No zeros, NaN, infinity or denormal.
__device__ uint32_t randomHalf(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    const auto r = static_cast<uint32_t>(x);
    return (r & 0x8000u) | ((120u + (r >> 16) % 8u) << 7) | ((r >> 20) & 0x7Fu);
}

__global__ void fillRandomKernel(uint32_t* ptr, int64_t words, uint64_t seed) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
        const uint64_t h = seed * 0x100000001B3ull + 2 * static_cast<uint64_t>(i);
        ptr[i] = (randomHalf(h + 1) << 16) | randomHalf(h);
    }
}

__global__ void p2pBytesKernel(unsigned char* ptr, int64_t bytes, uint32_t seed, int64_t stride) {
    const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes; i += step) {
        ptr[i] = static_cast<unsigned char>((i * stride + static_cast<int64_t>(seed)) & 0xff);
    }
}

}  // namespace

int launchTraffic(const void* src, void* dst, int64_t bytes, cudaStream_t stream) {
    const int64_t words = bytes / 2 / static_cast<int64_t>(sizeof(uint4));
    if (words <= 0) return cudaSuccess;
    trafficKernel<<<blocksFor(words), kThreads, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), words);
    return cudaGetLastError();
}

int launchAdam(float* p, const float* g, float* m, float* v, int64_t n, int32_t step, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    // torch.optim.AdamW defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2.
    const float b1 = 0.9f, b2 = 0.999f;
    const float t = static_cast<float>(step > 0 ? step : 1);
    const float bias1 = 1.0f - powf(b1, t), bias2 = 1.0f - powf(b2, t);
    adamKernel<<<blocksFor(n), kThreads, 0, stream>>>(p, g, m, v, n, 1e-3f, b1, b2, 1e-8f, 1e-2f, bias1, bias2);
    return cudaGetLastError();
}

int launchFill(void* ptr, int64_t bytes, uint32_t pattern, cudaStream_t stream) {
    const int64_t words = bytes / 4;
    if (words <= 0) return cudaSuccess;
    fillKernel<<<blocksFor(words), kThreads, 0, stream>>>(static_cast<uint32_t*>(ptr), words, pattern);
    return cudaGetLastError();
}

int launchFillRandom(void* ptr, int64_t bytes, uint64_t seed, cudaStream_t stream) {
    const int64_t words = bytes / 4;
    if (words <= 0) return cudaSuccess;
    fillRandomKernel<<<blocksFor(words), kThreads, 0, stream>>>(static_cast<uint32_t*>(ptr), words, seed);
    return cudaGetLastError();
}

int launchP2PBytes(void* ptr, int64_t bytes, uint32_t seed, int64_t stride, cudaStream_t stream) {
    if (bytes <= 0) return cudaSuccess;
    p2pBytesKernel<<<blocksFor(bytes), kThreads, 0, stream>>>(static_cast<unsigned char*>(ptr), bytes, seed, stride);
    return cudaGetLastError();
}

}  // namespace shardcast::cuda
