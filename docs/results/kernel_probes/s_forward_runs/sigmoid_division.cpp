// What the sigmoid's division costs the S forward's output loop, whether AVX-512's reciprocal estimate would buy it
// back, and what the exp polynomial costs: y = x sigmoid(v x) a + b over 4096 floats in L1, one thread, the best of 50
// rounds of 200 calls, four forms of the same loop:
//   A  the kernels' form (a copy of evonorm_ops.cpp's exp_fast and sigmoid: that file needs torch's headers;
//      auto-vectorized, vdivps per 16 values);
//   B  the same by intrinsics, 1 / (1 + e) as vrcp14ps and one Newton step;
//   C  plain C++, the reciprocal seeded by an integer subtraction and three Newton steps (vectorizable, no division);
//   D  A with a degree-5 exp polynomial: the interpolant at the 6 Chebyshev nodes of |r| <= ln2 / 2 (relative error
//      1.0e-7 in exact arithmetic against the degree-6 Taylor polynomial's 1.6e-7; coefficients from numpy's solve of
//      the Vandermonde system).
// Built with the kernels' flags (evonorm_core/ops/build.py):
//   g++ -O3 -march=native -mprefer-vector-width=512 -fno-math-errno -fassociative-math -fno-signed-zeros \
//     -fno-trapping-math sigmoid_division.cpp -o /tmp/sigmoid_division && /tmp/sigmoid_division
// Output (three runs) in sigmoid_division.txt. maxrel: the largest relative difference from A's output.
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cmath>
#include <vector>
template <int Degree = 6> inline float exp_fast(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float k = __builtin_rintf(x * 1.44269504f);
    const float r = __builtin_fmaf(-k, 1.42860677e-6f, __builtin_fmaf(-k, 0.693145752f, x));
    float p;
    if constexpr (Degree == 6) p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    else p = 1.00000008f + r * (1.00000001f + r * (0.49998869f + r * (0.16666505f + r * (0.04191751f + r * 0.00836915f))));
    const int32_t scale_bits = (static_cast<int32_t>(k) + 127) << 23;
    float scale; std::memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}
template <int Degree = 6> inline float sigmoid(float z) { return 1.0f / (1.0f + exp_fast<Degree>(-z)); }
__attribute__((noinline)) void loopA(const float* __restrict x, float* __restrict y, long n, float v, float a, float b) {
    for (long i = 0; i < n; i++) { float xi = x[i]; y[i] = xi * sigmoid(v * xi) * a + b; }
}
__attribute__((noinline)) void loopD(const float* __restrict x, float* __restrict y, long n, float v, float a, float b) {
    for (long i = 0; i < n; i++) { float xi = x[i]; y[i] = xi * sigmoid<5>(v * xi) * a + b; }
}
inline __m512 recip(__m512 d) {
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_fmadd_ps(_mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r, r);  // r + r (1 - d r)
}
// scalar-code variant: the division replaced by a Newton step from an integer-trick seed (vectorizable)
inline float recip_nr(float d) {
    int32_t i; std::memcpy(&i, &d, 4); i = 0x7EF311C3 - i; float r; std::memcpy(&r, &i, 4);
    r = r * (2.0f - d * r); r = r * (2.0f - d * r); r = r * (2.0f - d * r);
    return r;
}
__attribute__((noinline)) void loopC(const float* __restrict x, float* __restrict y, long n, float v, float a, float b) {
    for (long i = 0; i < n; i++) { float xi = x[i]; y[i] = xi * recip_nr(1.0f + exp_fast(-(v * xi))) * a + b; }
}
__attribute__((noinline)) void loopB(const float* __restrict x, float* __restrict y, long n, float v, float a, float b) {
    long i = 0;
    const __m512 vv = _mm512_set1_ps(v), av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
    for (; i + 16 <= n; i += 16) {
        __m512 xi = _mm512_loadu_ps(x + i);
        __m512 z = _mm512_mul_ps(vv, xi);
        // exp(-z)
        __m512 t = _mm512_sub_ps(_mm512_setzero_ps(), z);
        t = _mm512_max_ps(_mm512_min_ps(t, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.0f));
        __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860677e-6f), _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145752f), t));
        __m512 p = _mm512_set1_ps(1.0f/720);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f/120));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f/24));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f/6));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        __m512 e = _mm512_scalef_ps(p, k);
        __m512 s = recip(_mm512_add_ps(e, _mm512_set1_ps(1.0f)));
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_mul_ps(xi, s), av, bv));
    }
    for (; i < n; i++) { float xi = x[i]; y[i] = xi * sigmoid(v * xi) * a + b; }
}
int main() {
    const long n = 4096; std::vector<float> x(n), y(n), y2(n), y3(n), y4(n);
    for (long i = 0; i < n; i++) x[i] = (i % 1000 - 500) * 0.02f;
    auto time = [&](auto f, float* out) {
        double best = 1e9;
        for (int rep = 0; rep < 50; rep++) {
            auto t0 = std::chrono::steady_clock::now();
            for (int k = 0; k < 200; k++) f(x.data(), out, n, 1.1f, 0.9f, 0.1f);
            double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 200 / n * 1e9;
            if (t < best) best = t;
        }
        return best;
    };
    double a = time(loopA, y.data()), b = time(loopB, y2.data()), c = time(loopC, y3.data()), d = time(loopD, y4.data());
    auto maxrel = [&](const std::vector<float>& z) {
        double e = 0;
        for (long i = 0; i < n; i++) e = std::fmax(e, std::fabs(y[i] - z[i]) / (std::fabs(y[i]) + 1e-30));
        return e;
    };
    printf("A %.3f ns/elem  B(intrinsics rcp14+NR) %.3f ns/elem (%.2fx)  C(int-seed 3NR) %.3f (%.2fx)  "
           "D(degree-5 exp) %.3f (%.3fx)  maxrel B %.2e C %.2e D %.2e\n",
           a, b, a / b, c, a / c, d, a / d, maxrel(y2), maxrel(y3), maxrel(y4));
}
