// Probe (docs/benchmarks.md, "Where the time goes"): the per-element cost of the B series' output loop,
// y = x / max(sb, p x + q) w + b, in float32 and bfloat16, against BatchNorm's eval loop (y = max(x a + b, 0)),
// on data in L1 (planes of 49, 196 and 3920 elements, one thread), as the kernels write them (plain loops that
// GCC vectorizes, c10's conversions) and with hand-written AVX2 (the bfloat16 conversions of ATen's
// vec256_bfloat16.h; the division, or vrcpps with one Newton step in its place). Build and run:
//   g++ -std=c++20 -O3 -march=native -mprefer-vector-width=512 -fno-math-errno -fassociative-math \
//       -fno-signed-zeros -fno-trapping-math $(python -c "import torch.utils.cpp_extension as c; \
//       print(' '.join('-I' + p for p in c.include_paths()))") bf16_output_loop.cpp -o probe && ./probe
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

using i64 = int64_t;
using bf16 = c10::BFloat16;

template <typename A> inline A max_of(A a, A b) { return ((a > b) | (a != a)) ? a : b; }
template <typename A> inline A b_output(A x, A sb, A p, A q, A w, A b) { return x / max_of(sb, p * x + q) * w + b; }

template <typename T>
void b_plain(const T* __restrict x, T* __restrict y, i64 n) {
    for (i64 j = 0; j < n; j++) y[j] = static_cast<T>(b_output(static_cast<float>(x[j]), 1.1f, 0.5f, 0.9f, 1.2f, 0.1f));
}
template <typename T>
void bn_plain(const T* __restrict x, T* __restrict y, i64 n) {
    for (i64 j = 0; j < n; j++) y[j] = static_cast<T>(std::max(static_cast<float>(x[j]) * 1.2f + 0.1f, 0.0f));
}

inline __m256 widen8(const bf16* s) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)s)), 16));
}
inline void narrow8(__m256 v, bf16* d) {  // round to nearest even, NaN kept
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    _mm_storeu_si128((__m128i*)d, _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}
template <bool Reciprocal>
inline __m256 b_output8(__m256 x) {
    const __m256 m = _mm256_max_ps(_mm256_fmadd_ps(_mm256_set1_ps(0.5f), x, _mm256_set1_ps(0.9f)), _mm256_set1_ps(1.1f));
    __m256 z;
    if constexpr (Reciprocal) {
        const __m256 r = _mm256_rcp_ps(m);
        z = _mm256_mul_ps(x, _mm256_mul_ps(r, _mm256_fnmadd_ps(m, r, _mm256_set1_ps(2.0f))));
    } else {
        z = _mm256_div_ps(x, m);
    }
    return _mm256_fmadd_ps(z, _mm256_set1_ps(1.2f), _mm256_set1_ps(0.1f));
}
template <bool Reciprocal>
void b_avx2(const bf16* __restrict x, bf16* __restrict y, i64 n) {
    i64 j = 0;
    for (; j + 8 <= n; j += 8) narrow8(b_output8<Reciprocal>(widen8(x + j)), y + j);
    b_plain(x + j, y + j, n - j);
}
template <bool Reciprocal>
void b_avx2_f32(const float* __restrict x, float* __restrict y, i64 n) {
    i64 j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, b_output8<Reciprocal>(_mm256_loadu_ps(x + j)));
    b_plain(x + j, y + j, n - j);
}
void bn_avx2(const bf16* __restrict x, bf16* __restrict y, i64 n) {
    i64 j = 0;
    for (; j + 8 <= n; j += 8)
        narrow8(_mm256_max_ps(_mm256_fmadd_ps(widen8(x + j), _mm256_set1_ps(1.2f), _mm256_set1_ps(0.1f)),
                              _mm256_setzero_ps()), y + j);
    bn_plain(x + j, y + j, n - j);
}

template <typename T, typename F>
double ns_per_element(F f, i64 plane, std::vector<T>& x, std::vector<T>& y) {  // best of 20 rounds
    double best = 1e9;
    for (int round = 0; round < 20; round++) {
        const auto start = std::chrono::steady_clock::now();
        for (int rep = 0; rep < 100; rep++)
            for (i64 o = 0; o + plane <= (i64)x.size(); o += plane) f(x.data() + o, y.data() + o, plane);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best / (100.0 * x.size()) * 1e9;
}

int main() {
    const i64 n = 3920;  // 15 KiB of float32: in L1
    std::vector<bf16> xb(n), yb(n);
    std::vector<float> xf(n), yf(n);
    for (i64 i = 0; i < n; i++) xb[i] = xf[i] = (i % 97) * 0.02f - 1;
    std::printf("ns per element, one thread; plane = elements per call\n");
    std::printf("plane | f32 B div | f32 B rcp | f32 BN | bf16 B div | bf16 B div AVX2 | bf16 B rcp AVX2 | bf16 BN | bf16 BN AVX2\n");
    for (i64 plane : {49, 196, 3920}) {
        std::printf("%ld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f\n", plane,
                    ns_per_element(b_plain<float>, plane, xf, yf), ns_per_element(b_avx2_f32<true>, plane, xf, yf),
                    ns_per_element(bn_plain<float>, plane, xf, yf), ns_per_element(b_plain<bf16>, plane, xb, yb),
                    ns_per_element(b_avx2<false>, plane, xb, yb), ns_per_element(b_avx2<true>, plane, xb, yb),
                    ns_per_element(bn_plain<bf16>, plane, xb, yb), ns_per_element(bn_avx2, plane, xb, yb));
    }
}
