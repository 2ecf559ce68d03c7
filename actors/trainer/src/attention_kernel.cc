// The CPU kernels under yard::nn's self-attention (see attention_kernel.h). No LibTorch here:
// BLAS for the small matrix products, and a row softmax written so the compiler vectorises it
// (built for x86-64-v4 (AVX-512), x86-64-v3 (AVX2+FMA) and the baseline; the loader picks by the
// CPU's features. Not "arch=haswell": that clone is chosen by CPU model, so AMD CPUs with AVX2
// got the SSE baseline). The row
// reductions are vectorised by `omp simd` (-fopenmp-simd: no OpenMP runtime).
#include "attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <vector>

extern "C" {
// CBLAS, from the BLAS LibTorch itself uses (libblas.so.3: OpenBLAS when installed).
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
}

namespace yard::nn::detail {

namespace {

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f,
              c, static_cast<int>(ldc));
}

// exp(x) for x <= 0 (a softmax row less its maximum), to about 2 ulp: x = n·ln2 + r with
// |r| <= ln2/2, e^r by its degree-6 Taylor-like minimax polynomial (Cephes' expf), 2^n by
// building the float's exponent. Plain arithmetic, so the loops around it vectorise.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;  // e^-87 ≈ 1.6e-38, still a normal float
  // n = round(x·log2 e): adding and taking away 1.5·2^23 rounds to an integer (no libm call, so
  // the loops around stay vectorisable).
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  return y * __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
}

// Softmax of each row of s (rows × cols, leading dimension cols), in place.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void softmax_rows(float* s, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s + i * cols;
    float mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 1; j < cols; ++j) mx = row[j] > mx ? row[j] : mx;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < cols; ++j) {
      float e = exp_nonpositive(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) row[j] *= inv;
  }
}

// dS = P ∘ (dP − rowsum(P ∘ dP)), in place in dp: the softmax's backward.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void softmax_backward_rows(const float* p, float* dp, int64_t rows,
                                                                                     int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* pr = p + i * cols;
    float* dr = dp + i * cols;
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < cols; ++j) dot += pr[j] * dr[j];
    for (int64_t j = 0; j < cols; ++j) dr[j] = pr[j] * (dr[j] - dot);
  }
}

}  // namespace

// Block b is (batch n, head h): its q, k and v are T×hd matrices inside qkv (T, N, 3E) with
// leading dimension 3NE; its output a T×hd matrix inside out (T, N, E), leading dimension NE.
void attention_forward(const AttentionShape& s, int64_t b0, int64_t b1, const float* qkv, float* probs, float* out) {
  const int64_t E = s.heads * s.head_dim, ld = 3 * s.batch * E, ldo = s.batch * E, T = s.tokens;
  for (int64_t b = b0; b < b1; ++b) {
    int64_t n = b / s.heads, h = b % s.heads;
    const float* q = qkv + n * 3 * E + h * s.head_dim;
    const float* k = q + E;
    const float* v = q + 2 * E;
    float* p = probs + b * T * T;
    gemm(false, true, T, T, s.head_dim, s.scale, q, ld, k, ld, p, T);  // S = scale · Q Kᵀ
    softmax_rows(p, T, T);                                                // P = softmax(S)
    gemm(false, false, T, s.head_dim, T, 1.0f, p, T, v, ld, out + n * E + h * s.head_dim, ldo);  // O = P V
  }
}

void attention_backward(const AttentionShape& s, int64_t b0, int64_t b1, const float* qkv, const float* probs,
                        const float* dout, float* dqkv) {
  const int64_t E = s.heads * s.head_dim, ld = 3 * s.batch * E, ldo = s.batch * E, T = s.tokens;
  std::vector<float> dp(static_cast<size_t>(T * T));
  for (int64_t b = b0; b < b1; ++b) {
    int64_t n = b / s.heads, h = b % s.heads;
    const int64_t off = n * 3 * E + h * s.head_dim;
    const float *q = qkv + off, *k = q + E, *v = q + 2 * E;
    float *dq = dqkv + off, *dk = dq + E, *dv = dq + 2 * E;
    const float* p = probs + b * T * T;
    const float* dob = dout + n * E + h * s.head_dim;
    gemm(true, false, T, s.head_dim, T, 1.0f, p, T, dob, ldo, dv, ld);          // dV = Pᵀ dO
    gemm(false, true, T, T, s.head_dim, 1.0f, dob, ldo, v, ld, dp.data(), T);   // dP = dO Vᵀ
    softmax_backward_rows(p, dp.data(), T, T);                                  // dS
    gemm(false, false, T, s.head_dim, T, s.scale, dp.data(), T, k, ld, dq, ld);  // dQ = scale · dS K
    gemm(true, false, T, s.head_dim, T, s.scale, dp.data(), T, q, ld, dk, ld);   // dK = scale · dSᵀ Q
  }
}

}  // namespace yard::nn::detail
