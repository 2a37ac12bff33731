// The exp polynomial's share of the sigmoid loop: the kernels' degree-6 Taylor polynomial on |r| <= ln2 / 2 (relative
// error 1.6e-7 in exact arithmetic) against a degree-5 interpolant at the 6 Chebyshev nodes of that interval
// (1.0e-7; coefficients from numpy's solve of the Vandermonde system, 2026-11-30), in the loop of
// sigmoid_division.cpp (y = x sigmoid(v x) a + b over 4096 floats in L1, one thread, best of 50 rounds of 200 calls).
//   g++ -O3 -march=native -mprefer-vector-width=512 -fno-math-errno -fassociative-math -fno-signed-zeros \
//     -fno-trapping-math exp_degree.cpp -o /tmp/exp_degree && /tmp/exp_degree
// Output (three runs) in exp_degree.txt.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cmath>
#include <vector>
template <int DEG> inline float exp_fast(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float k = __builtin_rintf(x * 1.44269504f);
    const float r = __builtin_fmaf(-k, 1.42860677e-6f, __builtin_fmaf(-k, 0.693145752f, x));
    float p;
    if constexpr (DEG == 6) p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    else p = 1.00000008f + r * (1.00000001f + r * (0.49998869f + r * (0.16666505f + r * (0.04191751f + r * 0.00836915f))));
    const int32_t scale_bits = (static_cast<int32_t>(k) + 127) << 23;
    float scale; std::memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}
template <int DEG> __attribute__((noinline)) void loop(const float* __restrict x, float* __restrict y, long n, float v, float a, float b) {
    for (long i = 0; i < n; i++) { float xi = x[i]; y[i] = xi * (1.0f / (1.0f + exp_fast<DEG>(-(v * xi)))) * a + b; }
}
int main() {
    const long n = 4096; std::vector<float> x(n), y(n), y2(n);
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
    double a = time(loop<6>, y.data()), b = time(loop<5>, y2.data());
    printf("deg6 %.3f ns/elem  deg5 %.3f ns/elem  (%.3fx)\n", a, b, a / b);
}
