/* Fused CPU kernels for the EvoNorm layers (float32, NCHW or NHWC contiguous).
 *
 * Every kernel makes one pass over its inputs. Per-(n, c) coefficient arrays are
 * row-major (N, C); per-channel ones have C entries. Reductions write per-(n, c) sums
 * (float within blocks, double across them); the small per-group / per-channel algebra is done by the caller.
 * `nhwc` selects the layout: 0 = NCHW (a run is one (n, c) plane of HW elements),
 * 1 = NHWC (a run is one pixel's C channels).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef int64_t i64;

/* exp(x) inlined so that loops vectorize at full width: x = k ln2 + r with |r| <= ln2 / 2,
 * exp(r) by its degree-6 Taylor polynomial (relative error < 2e-7), 2^k through the exponent
 * bits. Inputs are clamped to the finite float range; a NaN input gives some finite value,
 * but every caller multiplies the result by x, so NaN still propagates. */
static inline float exp_approx(float x) {
    x = fminf(fmaxf(x, -87.0f), 88.0f);
    const float k = rintf(x * 1.44269504f);
    const float r = (x - k * 0.693145752f) - k * 1.42860677e-6f;
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    union { int32_t i; float f; } scale = {.i = ((int32_t)k + 127) << 23};
    return p * scale.f;
}

static inline float sigmoid(float z) { return 1.0f / (1.0f + exp_approx(-z)); }

/* Sums over a plane accumulate in float within blocks of BLOCK elements (vectorized; a
 * double accumulator makes the loop latency-bound, about 8x slower) and in double across
 * blocks. */
#define BLOCK 256
static inline i64 block_end(i64 start, i64 end) { return start + BLOCK < end ? start + BLOCK : end; }

/* ---- per-plane moments: s1 = sum (x - k), s2 = sum (x - k)^2 ----------------------
 * k is a per-(n, c) shift (the caller passes the plane's first value): summing x - k keeps
 * the variance exact when |mean| >> std, where sum x^2 - (sum x)^2 / n would cancel. */
void plane_sums(const float *restrict x, const float *restrict k, i64 N, i64 C, i64 HW, int nhwc, int nt,
                double *restrict s1, double *restrict s2) {
    if (!nhwc) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (i64 p = 0; p < N * C; p++) {
            const float *restrict xp = x + p * HW;
            const float kp = k[p];
            double a = 0, b = 0;
            for (i64 i0 = 0; i0 < HW; i0 += BLOCK) {
                float ba = 0, bb = 0;
                for (i64 i = i0; i < block_end(i0, HW); i++) { const float d = xp[i] - kp; ba += d; bb += d * d; }
                a += ba; b += bb;
            }
            s1[p] = a; s2[p] = b;
        }
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (i64 n = 0; n < N; n++) {
        double *a = s1 + n * C, *b = s2 + n * C;
        const float *kn = k + n * C;
        for (i64 c = 0; c < C; c++) { a[c] = 0; b[c] = 0; }
        for (i64 i = 0; i < HW; i++) {
            const float *restrict xr = x + (n * HW + i) * C;
            for (i64 c = 0; c < C; c++) { const double d = (double)xr[c] - kn[c]; a[c] += d; b[c] += d * d; }
        }
    }
}

/* The loops of an elementwise kernel: `BODY` sees x-index `j`, per-channel index `c`
 * and per-(n, c) index `nc`. NHWC collapses (n, pixel) so batch 1 still uses every thread. */
#define ELEMENTWISE_LOOPS(...)                                                           \
    if (!nhwc) {                                                                         \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                     \
        for (i64 nc = 0; nc < N * C; nc++) {                                             \
            const i64 c = nc % C;                                                        \
            for (i64 j = nc * HW; j < (nc + 1) * HW; j++) { __VA_ARGS__ }                   \
        }                                                                                \
    } else {                                                                             \
        _Pragma("omp parallel for collapse(2) num_threads(nt) schedule(static)")         \
        for (i64 n = 0; n < N; n++)                                                      \
            for (i64 i = 0; i < HW; i++) {                                               \
                const i64 base = (n * HW + i) * C;                                       \
                for (i64 c = 0; c < C; c++) { const i64 j = base + c, nc = n * C + c; __VA_ARGS__ } \
            }                                                                            \
    }

/* ---- S series: y = x * sigmoid(v x) * a + b ---------------------------------------- */
void s_forward(const float *restrict x, const float *restrict v, const float *restrict a, const float *restrict b, i64 N, i64 C, i64 HW,
               int nhwc, int nt, float *restrict y) {
    ELEMENTWISE_LOOPS(y[j] = x[j] * sigmoid(v[c] * x[j]) * a[nc] + b[c];)
}

/* P = sum g x s, Q = sum g x^2 s (1 - s), G = sum g, with s = sigmoid(v x). */
static inline void s_terms(float g, float x, float v, float *p, float *q) {
    const float s = sigmoid(v * x), f = x * s;
    *p = g * f;
    *q = g * x * f * (1.0f - s);
}

void s_backward_sums(const float *restrict g, const float *restrict x, const float *restrict v, i64 N, i64 C, i64 HW, int nhwc, int nt,
                     double *restrict P, double *restrict Q, double *restrict G) {
    if (!nhwc) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (i64 nc = 0; nc < N * C; nc++) {
            const float vc = v[nc % C];
            double sp = 0, sq = 0, sg = 0;
            for (i64 j0 = nc * HW; j0 < (nc + 1) * HW; j0 += BLOCK) {
                float bp = 0, bq = 0, bg = 0;
                for (i64 j = j0; j < block_end(j0, (nc + 1) * HW); j++) {
                    float p, q;
                    s_terms(g[j], x[j], vc, &p, &q);
                    bp += p; bq += q; bg += g[j];
                }
                sp += bp; sq += bq; sg += bg;
            }
            P[nc] = sp; Q[nc] = sq; G[nc] = sg;
        }
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (i64 n = 0; n < N; n++) {
        double *sp = P + n * C, *sq = Q + n * C, *sg = G + n * C;
        for (i64 c = 0; c < C; c++) { sp[c] = 0; sq[c] = 0; sg[c] = 0; }
        for (i64 i = 0; i < HW; i++) {
            const i64 base = (n * HW + i) * C;
            for (i64 c = 0; c < C; c++) {
                float p, q;
                s_terms(g[base + c], x[base + c], v[c], &p, &q);
                sp[c] += p; sq[c] += q; sg[c] += g[base + c];
            }
        }
    }
}

/* dx = g a (s + v x s (1 - s)) + k x + k0 */
void s_backward_dx(const float *restrict g, const float *restrict x, const float *restrict v, const float *restrict a, const float *restrict k, const float *restrict k0,
                   i64 N, i64 C, i64 HW, int nhwc, int nt, float *restrict dx) {
    ELEMENTWISE_LOOPS({
        const float s = sigmoid(v[c] * x[j]);
        dx[j] = g[j] * a[nc] * s * (1.0f + v[c] * x[j] * (1.0f - s)) + k[nc] * x[j] + k0[nc];
    })
}

/* ---- B series: y = x / max(sb, p x + q) * gamma + beta ------------------------------ */
void b_forward(const float *restrict x, const float *restrict sb, const float *restrict p, const float *restrict q, const float *restrict gamma,
               const float *restrict beta, i64 N, i64 C, i64 HW, int nhwc, int nt, float *restrict y) {
    ELEMENTWISE_LOOPS(y[j] = x[j] / fmaxf(sb[c], p[nc] * x[j] + q[nc]) * gamma[c] + beta[c];)
}

/* With d = max(sb, u), u = p x + q, z = x / d and dd = -g gamma z / d (the gradient
 * reaching d): U = sum dd where u > sb, UX = sum dd x there, B = sum dd elsewhere,
 * G = sum g, GZ = sum g z. */
static inline void b_terms(float g, float x, float sb, float p, float q, float gamma, float *u_dd, float *ux_dd,
                           float *b_dd, float *gz) {
    const float u = p * x + q, d = fmaxf(sb, u), z = x / d, dd = -g * gamma * z / d;
    const int m = u > sb;
    *u_dd = m ? dd : 0.0f;
    *ux_dd = m ? dd * x : 0.0f;
    *b_dd = m ? 0.0f : dd;
    *gz = g * z;
}

void b_backward_sums(const float *restrict g, const float *restrict x, const float *restrict sb, const float *restrict p, const float *restrict q,
                     const float *restrict gamma, i64 N, i64 C, i64 HW, int nhwc, int nt, double *restrict U, double *restrict UX,
                     double *restrict B, double *restrict G, double *restrict GZ) {
    if (!nhwc) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (i64 nc = 0; nc < N * C; nc++) {
            const i64 c = nc % C;
            double su = 0, sux = 0, sbb = 0, sg = 0, sgz = 0;
            for (i64 j0 = nc * HW; j0 < (nc + 1) * HW; j0 += BLOCK) {
                float bu = 0, bux = 0, bb = 0, bg = 0, bgz = 0;
                for (i64 j = j0; j < block_end(j0, (nc + 1) * HW); j++) {
                    float a1, a2, a3, a4;
                    b_terms(g[j], x[j], sb[c], p[nc], q[nc], gamma[c], &a1, &a2, &a3, &a4);
                    bu += a1; bux += a2; bb += a3; bg += g[j]; bgz += a4;
                }
                su += bu; sux += bux; sbb += bb; sg += bg; sgz += bgz;
            }
            U[nc] = su; UX[nc] = sux; B[nc] = sbb; G[nc] = sg; GZ[nc] = sgz;
        }
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (i64 n = 0; n < N; n++) {
        double *su = U + n * C, *sux = UX + n * C, *sbb = B + n * C, *sg = G + n * C, *sgz = GZ + n * C;
        for (i64 c = 0; c < C; c++) { su[c] = 0; sux[c] = 0; sbb[c] = 0; sg[c] = 0; sgz[c] = 0; }
        for (i64 i = 0; i < HW; i++) {
            const i64 base = (n * HW + i) * C;
            const float *restrict pn = p + n * C, *qn = q + n * C;
            for (i64 c = 0; c < C; c++) {
                float a1, a2, a3, a4;
                b_terms(g[base + c], x[base + c], sb[c], pn[c], qn[c], gamma[c], &a1, &a2, &a3, &a4);
                su[c] += a1; sux[c] += a2; sbb[c] += a3; sg[c] += g[base + c]; sgz[c] += a4;
            }
        }
    }
}

/* dx = g gamma / d + [u > sb] dd p + k x + k0 */
void b_backward_dx(const float *restrict g, const float *restrict x, const float *restrict sb, const float *restrict p, const float *restrict q,
                   const float *restrict gamma, const float *restrict k, const float *restrict k0, i64 N, i64 C, i64 HW, int nhwc, int nt,
                   float *restrict dx) {
    ELEMENTWISE_LOOPS({
        const float u = p[nc] * x[j] + q[nc], d = fmaxf(sb[c], u), gd = g[j] * gamma[c] / d;
        dx[j] = gd + (u > sb[c] ? -gd * x[j] / d * p[nc] : 0.0f) + k[nc] * x[j] + k0[nc];
    })
}
