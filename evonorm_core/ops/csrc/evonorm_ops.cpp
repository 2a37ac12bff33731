// CPU kernels of the EvoNorm operators (namespace `evonorm`; schemas, fake tensors and
// autograd are registered from Python in evonorm_core/ops/library.py; the eager layers' C++ autograd nodes are in
// eager_autograd.cpp).
//
// Each operator is one call per direction: the forward makes two passes over x (moments,
// then the output), the backward two passes over (grad, x) (per-(n, c) sums, then dx), and
// everything in between (group / batch combination, the per-(n, c) coefficients, the
// small parameter gradients) is O(N C) work done here, not by PyTorch ops from Python.
// The S series makes both passes of a direction per (n, group) run in NCHW and per sample
// slab in channels_last, so the second pass reads cache, not memory (docs/benchmarks.md); its
// NCHW backward of small planes works on a group's whole run at once (s_backward_small_planes).
// Layouts: NCHW-contiguous or channels_last-contiguous x (anything else is made
// contiguous); the backward's gradient in x's layout, or NCHW for a channels_last x (read in
// transposed tiles, ChannelsLastRows). Dtypes: float32, float16, bfloat16 (statistics in float32) and float64
// (statistics in float64). Affine weight/bias: absent, per channel (C) or per sample (N, C).
// The derivation of the backward is written out in evonorm_core/ops/library.py's docstring.
#include <Python.h>  // first, as Python requires

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace evonorm {
namespace {

using at::Tensor;
using i64 = int64_t;

template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };

// exp(-z) without libm so that loops vectorize: -z = k ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-5 polynomial
// p (minimax for relative error with p(0) = 1: 9e-8, 1.5e-7 evaluated in float32 with fma, against 2.2e-7 for the
// degree-6 Taylor polynomial), 2^k through the exponent bits. p is evaluated at t = -r = z + k ln2, so z is not
// negated: EXP_POLY holds p's coefficients from the highest power down, those of odd powers negated (nested fmas
// below, not a loop over them: with the loop GCC left the loops that call this scalar). The reduction uses rint
// and fma, which -fassociative-math cannot reorder. NaN stays NaN.
constexpr float EXP_POLY[] = {-0x1.0fa834p-7f, 0x1.573a54p-5f, -0x1.555a6ap-3f, 0x1.fffdc6p-2f, -0x1.fffff6p-1f, 1.0f};
inline float exp_negated(float z) {
    z = z < -88.0f ? -88.0f : z;
    z = z > 87.0f ? 87.0f : z;
    const float k = __builtin_rintf(z * -1.44269504f);
    const float t = __builtin_fmaf(k, 1.42860677e-6f, __builtin_fmaf(k, 0.693145752f, z));
    const float p = __builtin_fmaf(__builtin_fmaf(__builtin_fmaf(__builtin_fmaf(__builtin_fmaf(
        EXP_POLY[0], t, EXP_POLY[1]), t, EXP_POLY[2]), t, EXP_POLY[3]), t, EXP_POLY[4]), t, EXP_POLY[5]);
    const int32_t scale_bits = (static_cast<int32_t>(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}
inline double exp_negated(double z) { return std::exp(-z); }

template <typename A> inline A sigmoid(A z) { return A(1) / (A(1) + exp_negated(z)); }
// torch.maximum's rule, which the composed layers follow: a NaN in either operand is the result (a NaN or
// negative moving variance must not be hidden in eval).
template <typename A> inline A max_of(A a, A b) { return ((a > b) | (a != a)) ? a : b; }  // | not ||: no branch, so loops vectorize

#if defined(__AVX512F__)
// The S series' float32 and bfloat16 loops on 16 lanes (lanes::native), written out: GCC 12 ends an
// auto-vectorized loop with scalar iterations, and a plane of 49 values (7 x 7) was three vector iterations and a
// scalar one that cost about as much (the S backward took as long at 7 x 7 as at 8 x 8). Here a loop's last vector
// is masked, and the backward takes a run of planes as one array (for_run_vectors), so that no plane ends in a
// mostly empty vector (docs/benchmarks.md, "Plane tails").
namespace lanes {
using Mask = __mmask16;
constexpr i64 WIDTH = 16;
constexpr Mask ALL = 0xFFFF;

inline Mask first(i64 count) { return count >= WIDTH ? ALL : Mask((1u << count) - 1); }
// Of the first `count` lanes, those in half h (lanes 8h .. 8h + 7), as a mask of that half's eight (double) lanes.
inline __mmask8 first_of_half(i64 count, int h) {
    return static_cast<__mmask8>((1u << std::clamp<i64>(count - 8 * h, 0, 8)) - 1);
}
// Masked-off lanes read as 0. A full mask takes the plain instruction: on an AMD EPYC (Zen 4), the masked forms
// with every lane set took the float32 NCHW S backward to 1.6-1.8x its time at 16x1024x14x14 and 1.2-1.4x at
// 16x2048x7x7, where its tensors come from memory (docs/benchmarks.md, "Full vectors unmasked").
inline __m512 load(const float* p, Mask m) { return m == ALL ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p); }
inline void store(float* p, Mask m, __m512 v) {
    if (m == ALL)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, m, v);
}
inline __m512 splat(float v) { return _mm512_set1_ps(v); }

#if defined(__AVX512BW__) && defined(__AVX512VL__)
// bfloat16 values in float32 lanes: widened exactly (the 16 bits above 16 zero bits), stored rounded as c10::BFloat16
// rounds (to nearest even; NaN as 0x7FC0), bit for bit. Where GCC vectorized c10's conversions in the scalar loops, the
// S operators took as long in bfloat16 as in float32 at half the bytes. narrow (below) rounds whole float32 arrays by
// vcvtne2ps2bf16 and gives blocks with NaN or subnormals to c10; a vector stored inside a loop takes vcvtneps2bf16 the
// same way, and where it holds either, integer rounding that is exact for every value (with the integer rounding alone,
// B0's NCHW bfloat16 inference took 1.10-1.20x its time at planes of 7 x 7 to 14 x 14, the S forward 1.12-1.16x at 8 x
// 8 to 56 x 56; docs/results/kernel_probes/b_inference_lanes). Unlike float32's, these stay masked for full vectors
// too: in one A/B the plain load took the S backward to 1.03-1.09x its time at cache-resident shapes (the plain store
// 1.00-1.02x), and neither gained where the tensors come from memory (docs/benchmarks.md, "Full vectors unmasked").
inline __m512 load(const c10::BFloat16* p, Mask m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
inline void store(c10::BFloat16* p, Mask m, __m512 v) {
#if defined(__AVX512BF16__)
    // vcvtneps2bf16 rounds to nearest even too, but takes subnormal inputs as zero and keeps a NaN's payload
    if (!_mm512_fpclass_ps_mask(v, 0x01 | 0x20 | 0x80)) {  // vfpclassps classes: quiet NaN, subnormal, signalling NaN
        const __m256bh rounded = _mm512_cvtneps_pbh(v);
        _mm256_mask_storeu_epi16(p, m, reinterpret_cast<const __m256i&>(rounded));
        return;
    }
#endif
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i bias = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1)),
                                          _mm512_set1_epi32(0x7FFF));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(rounded));
}
template <typename T>
constexpr bool native = std::is_same_v<T, float> || std::is_same_v<T, c10::BFloat16>;
#else
template <typename T>
constexpr bool native = std::is_same_v<T, float>;
#endif

// body(j, mask) for j = 0, 16, ... < n, the mask selecting the lanes j .. min(j + 16, n) - 1.
template <typename Body>
inline void for_vectors(i64 n, Body&& body) {
    i64 j = 0;
    for (; j + WIDTH <= n; j += WIDTH) body(j, ALL);
    if (j < n) body(j, first(n - j));
}

// A per-plane value of a run of planes in the lanes of a vector that spans planes p and p + 1 (for_run_vectors):
// at(here) has plane p's value where `here` is set, plane p + 1's elsewhere; next(p) once plane p has ended.
class PlaneValues {
  public:
    PlaneValues(const float* values, i64 planes)
        : values_(values), planes_(planes), here_(splat(values[0])),
          next_(splat(values[std::min<i64>(1, planes - 1)])) {}
    __m512 at(Mask here) const { return here == ALL ? here_ : _mm512_mask_blend_ps(here, next_, here_); }
    void next(i64 p) {
        here_ = next_;
        next_ = splat(values_[std::min(p + 2, planes_ - 1)]);
    }

  private:
    const float* values_;
    i64 planes_;
    __m512 here_, next_;
};

// body(j, here, valid) for the vectors of a run of L values in NCHW planes of HW >= WIDTH values, taken as one
// array: lanes past L are not `valid`; a valid lane lies in the current plane p where `here` is set and in plane
// p + 1 elsewhere (HW >= WIDTH: no vector spans three planes). ended(p) follows the vector in which plane p ends.
template <typename Body, typename Ended>
inline void for_run_vectors(i64 L, i64 HW, Body&& body, Ended&& ended) {
    i64 p = 0, end = HW;  // plane p's end
    auto step = [&](i64 j, Mask valid) {
        body(j, first(end - j), valid);
        if (end <= j + WIDTH) {
            ended(p++);
            end += HW;
        }
    };
    for_vectors(L, step);  // full vectors with a constant mask: float32's loads and stores plain (load, store)
}

// exp_negated on 16 lanes, 2^k by scalef (one operation for the exponent bits' four). max/min return their second
// operand where either is NaN: NaN stays NaN.
inline __m512 exp_negated(__m512 z) {
    z = _mm512_min_ps(splat(87.0f), _mm512_max_ps(splat(-88.0f), z));
    const __m512 k =
        _mm512_roundscale_ps(_mm512_mul_ps(z, splat(-1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 t = _mm512_fmadd_ps(k, splat(1.42860677e-6f), _mm512_fmadd_ps(k, splat(0.693145752f), z));
    __m512 p = splat(EXP_POLY[0]);
    for (int i = 1; i < 6; i++) p = _mm512_fmadd_ps(p, t, splat(EXP_POLY[i]));
    return _mm512_scalef_ps(p, k);
}
inline __m512 sigmoid(__m512 z) {
    const __m512 one = splat(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, exp_negated(z)));
}

// The permutation of fold<G> (below) that picks, for each output lane, the first (shift 0) or second (shift G) of the
// two input lanes it adds: lanes 0-7 come from a, 8-15 from b (index + 16), each input's values spanning 2G lanes.
template <int G>
constexpr std::array<int, WIDTH> fold_lanes(int shift) {
    std::array<int, WIDTH> index{};
    for (int l = 0; l < WIDTH; l++) index[l] = (l < 8 ? 0 : 16) + (l % 8) / G * 2 * G + (l % 8) % G + shift;
    return index;
}
// a's and b's values, each the sum of 2G lanes, as sums of G lanes: a's in lanes 0-7, b's in 8-15, in order.
template <int G>
inline __m512 fold(__m512 a, __m512 b) {
    static constexpr std::array<int, WIDTH> first = fold_lanes<G>(0), second = fold_lanes<G>(G);
    return _mm512_add_ps(_mm512_permutex2var_ps(a, _mm512_loadu_si512(first.data()), b),
                         _mm512_permutex2var_ps(a, _mm512_loadu_si512(second.data()), b));
}
// lo in lanes 0-7 and hi in 8-15 (AVX-512 F alone: no AVX-512 DQ or VL needed, as for the rest of lanes' float32).
inline __m512 join(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}
inline __m256 upper(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
// Lane i of the result: the sum of v[i]'s lanes (v is overwritten). Fifteen folds of two permutes and an add, where
// sixteen horizontal sums take four shuffles and four adds each.
inline __m512 sums_of(__m512 (&v)[WIDTH]) {
    for (int i = 0; i < 8; i++) v[i] = fold<8>(v[2 * i], v[2 * i + 1]);
    for (int i = 0; i < 4; i++) v[i] = fold<4>(v[2 * i], v[2 * i + 1]);
    for (int i = 0; i < 2; i++) v[i] = fold<2>(v[2 * i], v[2 * i + 1]);
    return fold<1>(v[0], v[1]);
}
}  // namespace lanes
#endif

// out[j] = sigmoid(v[j] x[j]) for j < n: on 16 lanes where T is lanes::native (lanes::sigmoid), else as GCC
// vectorizes the scalar sigmoid.
template <typename T, typename A>
void sigmoids(const T* __restrict x, const A* __restrict v, A* __restrict out, i64 n) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T>) {
        lanes::for_vectors(n, [&](i64 j, lanes::Mask m) {
            lanes::store(out + j, m, lanes::sigmoid(_mm512_mul_ps(lanes::load(v + j, m), lanes::load(x + j, m))));
        });
        return;
    }
#endif
    for (i64 j = 0; j < n; j++) out[j] = sigmoid(v[j] * static_cast<A>(x[j]));
}

// Sums over long runs accumulate in the accumulation type within blocks of BLOCK
// elements (vectorized) and in double across blocks.
constexpr i64 BLOCK = 256;
// Planes the NCHW S backward sums in one loop (s_plane_sums): 2 was 3-6 % faster than 1 at 7x7 and 8x8, 4 was not.
constexpr i64 PLANES_AT_ONCE = 2;

struct Shape {
    i64 N, C, HW;
    bool nhwc;
};

Shape shape_of(const Tensor& x) {
    return {x.size(0), x.size(1), x.size(2) * x.size(3), !x.is_contiguous()};
}

// shape_of, except that planes of one value (laid out alike in both layouts) are taken as channels_last rows of C:
// the B operators and the S forward were 1.6-3x faster there than paying a plane's fixed cost per value; the S
// backward keeps them as planes, where its small-plane path is faster still (docs/benchmarks.md, "Planes of one
// value").
Shape rows_shape_of(const Tensor& x) {
    Shape s = shape_of(x);
    s.nhwc = s.nhwc || s.HW == 1;
    return s;
}

// x as a dense tensor: NCHW-contiguous, or channels_last-contiguous when it is that already.
Tensor dense(const Tensor& x) {
    if (x.is_contiguous() || x.is_contiguous(at::MemoryFormat::ChannelsLast)) return x;
    return x.contiguous();
}

// The gradient a backward reads, with x's element type: in x's layout, except an NCHW-contiguous gradient of a
// channels_last x, which is returned as it is for the kernels to read through ChannelsLastRows. (Inductor hands
// the operators such gradients around the depthwise convolutions it runs in NCHW; transposing the whole tensor
// first took the operator to 1.4-4.8x its time, docs/results/kernel_probes/mixed_layout_grad.)
Tensor grad_for(const Tensor& grad, const Tensor& x, const Shape& s) {
    const Tensor g = grad.to(x.scalar_type());
    if (s.nhwc && g.is_contiguous() && !g.is_contiguous(at::MemoryFormat::ChannelsLast)) return g;
    return g.contiguous(s.nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
}

// out[j * out_stride + c] = in[c * in_stride + j] for c < C, j < J.
template <typename T>
void transpose_block(const T* __restrict in, i64 in_stride, i64 C, i64 J, T* __restrict out, i64 out_stride) {
    for (i64 c = 0; c < C; c++)
        for (i64 j = 0; j < J; j++) out[j * out_stride + c] = in[c * in_stride + j];
}

#if defined(__AVX2__)
// float32 in 8 x 8 blocks of register shuffles: with the element-by-element loop above, the NCHW-gradient call was
// up to 3x slower (16x2048x7x7, B; a development probe, not committed).
inline void transpose8x8(const float* in, i64 in_stride, float* out, i64 out_stride) {
    __m256 r[8], t[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(in + k * in_stride);
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        r[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(out + k * out_stride, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
        _mm256_storeu_ps(out + (k + 4) * out_stride, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
    }
}

template <>
void transpose_block<float>(const float* __restrict in, i64 in_stride, i64 C, i64 J, float* __restrict out,
                            i64 out_stride) {
    const i64 C8 = C - C % 8, J8 = J - J % 8;
    for (i64 c = 0; c < C8; c += 8)
        for (i64 j = 0; j < J8; j += 8) transpose8x8(in + c * in_stride + j, in_stride, out + j * out_stride + c, out_stride);
    for (i64 c = 0; c < C; c++)  // the edges
        for (i64 j = c < C8 ? J8 : 0; j < J; j++) out[j * out_stride + c] = in[c * in_stride + j];
}
#endif

// Rows [i0, i0 + rows) of one sample's C planes of HW values, channels_last (rows of C) into out, in blocks of
// 16 rows x 64 channels, whose reads and writes stay in L1.
template <typename T>
void transpose_rows(const T* planes, i64 HW, i64 C, i64 i0, i64 rows, T* out) {
    constexpr i64 ROWS = 16, CHANNELS = 64;
    for (i64 j0 = 0; j0 < rows; j0 += ROWS)
        for (i64 c0 = 0; c0 < C; c0 += CHANNELS)
            transpose_block(planes + c0 * HW + i0 + j0, HW, std::min(CHANNELS, C - c0), std::min(ROWS, rows - j0),
                            out + j0 * C + c0, C);
}

// Rows of a channels_last backward's passes that transpose an NCHW gradient a tile at a time.
constexpr i64 TILE = 16;

// The gradient of a channels_last x (shape s) as rows of C, whatever its layout (g from grad_for): rows(n, i0,
// count) points at sample n's rows i0 .. i0 + count - 1, in place when the gradient is channels_last, else
// transposed into a buffer of this object's (so one object per thread).
template <typename T>
class ChannelsLastRows {
  public:
    ChannelsLastRows(const Tensor& g, const Shape& s)
        : g_(g.const_data_ptr<T>()), HW_(s.HW), C_(s.C), planes_(!g.is_contiguous(at::MemoryFormat::ChannelsLast)) {}
    const T* rows(i64 n, i64 i0, i64 count) {
        const T* sample = g_ + n * HW_ * C_;
        if (!planes_) return sample + i0 * C_;
        buffer_.resize(std::max<size_t>(buffer_.size(), count * C_));
        transpose_rows(sample, HW_, C_, i0, count, buffer_.data());
        // The next two tiles' lines of every plane, prefetched: C streams are more than the hardware prefetchers
        // follow. b_backward with an NCHW gradient of a channels_last x read from memory took about 0.8-0.95x its
        // time from 4x96x64x64 to 16x256x56x56, no less at 8 x 8 and 7 x 7 (docs/results/kernel_probes/grad_prefetch/).
        const i64 ahead = i0 + count;
        if (ahead < HW_)
            for (i64 c = 0; c < C_; c++)
                for (i64 k = 0; k < 2 * count && ahead + k < HW_; k += 64 / static_cast<i64>(sizeof(T)))
                    __builtin_prefetch(sample + c * HW_ + ahead + k);
        return buffer_.data();
    }

  private:
    const T* g_;
    i64 HW_, C_;
    bool planes_;
    std::vector<T> buffer_;
};

// An output of 32 MiB or more (glibc's largest mmap threshold) is mmap'd fresh by the allocator on every
// call and faulted in 4 KiB at a time on its first write: at ResNet-50's 56 x 56 stage that was about
// half of a fwd+bwd (docs/benchmarks.md, "Roofline"). Advising transparent huge pages for the buffer's
// 2 MiB-aligned interior makes it 512x fewer faults. Smaller buffers are left alone: they come from the
// reused heap, where the advice only splits mappings. Advice only: where THP is off, nothing changes.
void advise_huge_pages(const Tensor& t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr uintptr_t HUGE = uintptr_t(2) << 20, FRESH = uintptr_t(32) << 20;
    if (t.nbytes() < FRESH) return;
    const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
    const uintptr_t first = (begin + HUGE - 1) & ~(HUGE - 1), last = (begin + t.nbytes()) & ~(HUGE - 1);
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
}

Tensor empty_like_layout(const Tensor& x, at::ScalarType dtype) {
    const auto format = x.is_contiguous() ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast;
    Tensor out = at::empty(x.sizes(), x.options().dtype(dtype).memory_format(format));
    advise_huge_pages(out);
    return out;
}

at::ScalarType acc_dtype(const Tensor& x) {
    return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Elements of the runs of small NCHW planes that the B forward handles together (16 KiB of float32: in L1).
constexpr i64 PLANE_RUN = 4096;

i64 grain(i64 work_per_item) { return std::max<i64>(1, 16384 / std::max<i64>(1, work_per_item)); }

// body(i) for i in [0, count), in parallel: the O(N C) work between the passes over x is a
// large part of a layer's time where planes are small (ResNet-50's 2048 x 7 x 7 stage).
template <typename Body>
void for_each_index(i64 count, i64 work_per_item, Body body) {
    at::parallel_for(0, count, grain(work_per_item), [&](i64 begin, i64 end) {
        for (i64 i = begin; i < end; i++) body(i);
    });
}

// out[j] = in[j] as T (float16 or bfloat16) for j < n, rounded as c10 rounds. With AVX-512 BF16, bfloat16 takes one
// instruction per 32 values (vcvtne2ps2bf16, to nearest even as c10::BFloat16), about ten fewer than c10's
// rounding; that instruction flushes subnormals to zero and quiets NaNs its own way, so a block of 32 holding either
// is converted by c10 instead: the result is c10's, bit for bit, always.
template <typename T>
void narrow(const float* __restrict in, T* __restrict out, i64 n) {
    i64 j = 0;
#if defined(__AVX512BF16__)
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
        constexpr int nan_or_subnormal = 0x01 | 0x20 | 0x80;  // vfpclassps classes: quiet NaN, subnormal, signalling NaN
        for (; j + 32 <= n; j += 32) {
            const __m512 lo = _mm512_loadu_ps(in + j), hi = _mm512_loadu_ps(in + j + 16);
            if (_mm512_fpclass_ps_mask(lo, nan_or_subnormal) | _mm512_fpclass_ps_mask(hi, nan_or_subnormal)) {
                for (i64 k = j; k < j + 32; k++) out[k] = static_cast<T>(in[k]);
            } else {
                const __m512bh both = _mm512_cvtne2ps_pbh(hi, lo);
                _mm512_storeu_si512(out + j, reinterpret_cast<const __m512i&>(both));
            }
        }
    }
#endif
    for (; j < n; j++) out[j] = static_cast<T>(in[j]);
}

// body(out) writing a run of L outputs: into y itself, or, for float16 and bfloat16, into a float32 buffer of the
// thread's that is narrowed into y after, in one loop (narrow).
template <typename A, typename T, typename Body>
void into_run(T* y, i64 L, Body&& body) {
    if constexpr (std::is_same_v<T, A>) {
        body(y);
    } else {
        thread_local std::vector<A> buffer;
        if (static_cast<i64>(buffer.size()) < L) buffer.resize(L);
        body(buffer.data());
        narrow(buffer.data(), y, L);
    }
}

// body(xr, yr) on the contiguous run x[0, L) and its output y[0, L): as they are, or, with `widen` (float16 and
// bfloat16), as float32 copies in the thread's buffers, x widened in one loop before and the output narrowed in one
// after (into_run). Planes of a few values (49 at 7 x 7: three vectors and a tail) then convert in loops over the
// whole run: bfloat16 B inference at 16x2048x7x7 took 0.75-0.82x its time, the S forward 0.67-0.72x
// (docs/benchmarks.md, "bfloat16 runs").
template <typename A, typename T, typename Body>
void on_run(const T* x, T* y, i64 L, bool widen, Body&& body) {
    if constexpr (std::is_same_v<T, A>) {
        body(x, y);
    } else if (!widen) {
        body(x, y);
    } else {
        thread_local std::vector<A> xa;
        if (static_cast<i64>(xa.size()) < L) xa.resize(L);
        A* __restrict xw = xa.data();
        for (i64 j = 0; j < L; j++) xw[j] = static_cast<A>(x[j]);
        into_run<A>(y, L, [&](A* yw) { body(static_cast<const A*>(xw), yw); });
    }
}

// Planes shorter than this many values are widened a run at a time (on_run; at 14 x 14 it gained nothing).
constexpr i64 WIDEN_BELOW = 64;

// A per-channel (C) or per-sample (N, C) parameter read as type A, or `fill` everywhere when absent: read
// in place (the (N, C) copy it replaces was about a tenth of B0's forward at ResNet-50's 2048 x 7 x 7 stage).
template <typename A>
class PerNC {
  public:
    PerNC(const std::optional<Tensor>& t, i64 C, A fill) : C_(C) {
        if (t.has_value()) {
            data_ = t->to(c10::CppTypeToScalarType<A>::value).contiguous();  // t itself when it is that already
            p_ = data_.template const_data_ptr<A>();
            per_sample_ = data_.dim() == 2;
        } else {
            fill_.assign(C, fill);
            p_ = fill_.data();
        }
    }
    A operator()(i64 n, i64 c) const { return p_[per_sample_ ? n * C_ + c : c]; }
    const A* row(i64 n) const { return per_sample_ ? p_ + n * C_ : p_; }  // sample n's C values
    bool per_sample() const { return per_sample_; }

  private:
    i64 C_;
    Tensor data_;
    std::vector<A> fill_;
    const A* p_ = nullptr;
    bool per_sample_ = false;
};

// Mean and biased variance of a contiguous run of L values. Sums are of x - k, k the run's first
// value, so the variance stays exact for near-constant runs (|mean| >> std).
template <typename T, typename A>
void run_moments(const T* __restrict run, i64 L, double& mean, double& var) {
    const A k = static_cast<A>(run[0]);
    double s1 = 0, s2 = 0;
    for (i64 j0 = 0; j0 < L; j0 += BLOCK) {
        const i64 j1 = std::min(j0 + BLOCK, L);
        A b1 = 0, b2 = 0;
        for (i64 j = j0; j < j1; j++) {
            const A d = static_cast<A>(run[j]) - k;
            b1 += d;
            b2 += d * d;
        }
        s1 += b1;
        s2 += b2;
    }
    const double offset = s1 / L;
    mean = k + offset;
    var = std::max(s2 / L - offset * offset, 0.0);
}

// Channels_last loops over a sample's rows of C channels take ROW_GROUP rows per pass over the channels in the
// moments (S and B forward), the B output and the B backward's sums. Row by row, each row's sums were stored and
// reloaded by the next (a store-to-load round trip per vector and row), and the channel loop's fixed cost and the
// per-channel values' loads came per row: at MobileNetV2's 4x96x64x64 the B forward took about 1.7x and the
// backward 1.9x their NCHW time. The B backward's dx and the S backward's sums stay row by row: grouped, they were
// 15-40 % slower where the tensors do not fit in cache (16x256x56x56). docs/results/kernel_probes/row_groups/.
constexpr i64 ROW_GROUP = 4;

// Grouped rows are interleaved streams: ROW_GROUP rows of under 2 KiB share a page or two, read a vector from each
// in turn. Where x came from memory, that took the channels_last moments, B output and B backward sums up to 1.7x the
// time of reading the rows one by one (float32 at 16x256x56x56, 4x256x56x56, 32x96x64x64 and 64x96x32x32; bfloat16
// at 16x256x56x56); where x was in cache (4x96x64x64, 4x144x32x32) or its rows long (16x1024x14x14), one by one took
// 1.15-1.46x the time, and with bfloat16 rows of 96 channels (192 bytes, where the per-row work counts for more than
// the memory) 1.03-1.23x (docs/results/kernel_probes/streamed_rows/). So rows are read one by one only where x is over
// CACHED_BYTES, a quarter of this machine's 32 MiB last-level cache (a fixed size: the caches that sysconf reports in
// a VM can be the host's, 320 MiB here), and a row holds STREAMED_ROW_BYTES.
constexpr i64 CACHED_BYTES = i64(8) << 20;
constexpr i64 STREAMED_ROW_BYTES[2] = {256, 2048};  // [lowest, highest)

// Whether the channels_last loops over x (shape s, elements of `element_size` bytes) group rows (for_row_groups).
inline bool group_rows(const Shape& s, i64 element_size) {
    const i64 row = s.C * element_size;
    const bool streamed = row >= STREAMED_ROW_BYTES[0] && row < STREAMED_ROW_BYTES[1];
    return !streamed || s.N * s.HW * row <= CACHED_BYTES;
}

// f(i, R) for the rows i0 .. i1 - 1: with `grouped`, in groups of R = ROW_GROUP rows from i and the rest one at a
// time, else all one at a time (R an integral_constant, so that f's loop over a group's rows unrolls).
template <typename F>
inline void for_row_groups(i64 i0, i64 i1, bool grouped, F&& f) {
    i64 i = i0;
    if (grouped)
        for (; i + ROW_GROUP <= i1; i += ROW_GROUP) f(i, std::integral_constant<i64, ROW_GROUP>{});
    for (; i < i1; i++) f(i, std::integral_constant<i64, 1>{});
}

// f(r) for r = 0 .. R - 1, written out at compile time (as a loop inside the vectorized channel loop, GCC kept it a
// loop and read the rows with gathers).
template <i64 R, typename F>
inline void for_each_row_of_group(F&& f) {
    [&]<i64... r>(std::integer_sequence<i64, r...>) { (f(r), ...); }(std::make_integer_sequence<i64, R>{});
}

// Adds the shifted sums of R rows of C values (x - k and its square, per channel) to b1 and b2. (Functions with
// __restrict parameters: as lambdas over the caller's arrays, GCC read the arrays with gathers.)
template <i64 R, typename T, typename A>
void add_moment_rows(const T* __restrict x, i64 C, const A* __restrict k, A* __restrict b1, A* __restrict b2) {
#pragma omp simd
    for (i64 c = 0; c < C; c++) {
        A d1 = 0, d2 = 0;
        for_each_row_of_group<R>([&](i64 r) {
            const A d = static_cast<A>(x[r * C + c]) - k[c];
            d1 += d;
            d2 += d * d;
        });
        b1[c] += d1;
        b2[c] += d2;
    }
}

// Per-channel shifted sums over a slab's HW rows: s1[c] = sum (x - k_c), s2[c] = sum (x - k_c)^2 with k_c the
// channel's first value, in A within blocks of BLOCK rows and in double across blocks.
template <typename T, typename A>
void slab_moments(const T* x, i64 HW, i64 C, bool grouped, std::vector<A>& k, std::vector<A>& acc,
                  std::vector<double>& s1, std::vector<double>& s2) {
    A *__restrict kp = k.data(), *__restrict b1 = acc.data(), *__restrict b2 = acc.data() + C;
    for (i64 c = 0; c < C; c++) kp[c] = static_cast<A>(x[c]), s1[c] = s2[c] = 0;
    for (i64 i0 = 0; i0 < HW; i0 += BLOCK) {
        std::fill(acc.begin(), acc.end(), A(0));
        for_row_groups(i0, std::min(i0 + BLOCK, HW), grouped,
                       [&](i64 i, auto R) { add_moment_rows<R>(x + i * C, C, kp, b1, b2); });
        for (i64 c = 0; c < C; c++) s1[c] += b1[c], s2[c] += b2[c];
    }
}

// The per-channel mean and biased variance of channels_last samples, into mean[n C + c] and var[n C + c] (one
// per thread: it holds the scratch of slab_moments).
template <typename T, typename A>
struct SampleMoments {
    explicit SampleMoments(i64 C) : k(C), acc(2 * C), s1(C), s2(C) {}
    void operator()(const T* x, const Shape& s, i64 n, double* mean, double* var) {
        slab_moments<T, A>(x + n * s.HW * s.C, s.HW, s.C, group_rows(s, sizeof(T)), k, acc, s1, s2);
        for (i64 c = 0; c < s.C; c++) {
            const double offset = s1[c] / s.HW;
            mean[n * s.C + c] = k[c] + offset;
            var[n * s.C + c] = std::max(s2[c] / s.HW - offset * offset, 0.0);
        }
    }
    std::vector<A> k, acc;
    std::vector<double> s1, s2;
};

// Whether the B operators' loops over NCHW planes of HW values run on lanes (the forward's moments and output, the
// backward's sums and dx): T lanes::native and a plane of at most BLOCK values (its sums in float32, as
// run_moments' blocks).
template <typename T, typename A>
constexpr bool b_on_lanes_applies(i64 HW) {
#if defined(__AVX512F__)
    return lanes::native<T> && std::is_same_v<A, float> && HW <= BLOCK;
#else
    return false;
#endif
}

#if defined(__AVX512F__)
// The shifted sums of planes x, x + HW, ... (`planes` <= WIDTH of them) folded into lanes: lane i of sum1 and sum2 is
// plane i's sum of x - k and of (x - k)^2, lane i of k its first value (0 past `planes`). Each plane's sums stay in
// the lanes of two vectors until sixteen are folded at once (lanes::sums_of), where GCC's loops took two horizontal
// sums a plane.
template <typename T>
void plane_group_sums(const T* x, i64 HW, i64 planes, __m512& sum1, __m512& sum2, __m512& k) {
    __m512 sums1[lanes::WIDTH], sums2[lanes::WIDTH];
    alignas(64) float first[lanes::WIDTH] = {};
    for (i64 i = 0; i < lanes::WIDTH; i++) {
        __m512 b1 = _mm512_setzero_ps(), b2 = _mm512_setzero_ps();
        if (i < planes) {
            const T* plane = x + i * HW;
            first[i] = static_cast<float>(plane[0]);
            const __m512 ki = lanes::splat(first[i]);
            lanes::for_vectors(HW, [&](i64 j, lanes::Mask m) {
                const __m512 d = _mm512_maskz_sub_ps(m, lanes::load(plane + j, m), ki);
                b1 = _mm512_add_ps(b1, d);
                b2 = _mm512_fmadd_ps(d, d, b2);
            });
        }
        sums1[i] = b1;
        sums2[i] = b2;
    }
    sum1 = lanes::sums_of(sums1);
    sum2 = lanes::sums_of(sums2);
    k = _mm512_load_ps(first);
}

// Lanes 8h .. 8h + 7 of plane_group_sums' lanes as each plane's mean and biased variance, in double with the
// operations of run_moments.
inline void half_mean_var(__m512 sum1, __m512 sum2, __m512 k, i64 HW, int h, __m512d& mean, __m512d& var) {
    auto half = [h](__m512 f) { return _mm512_cvtps_pd(h ? lanes::upper(f) : _mm512_castps512_ps256(f)); };
    const __m512d length = _mm512_set1_pd(static_cast<double>(HW));
    const __m512d offset = _mm512_div_pd(half(sum1), length);
    mean = _mm512_add_pd(half(k), offset);
    var = _mm512_max_pd(_mm512_setzero_pd(),
                        _mm512_sub_pd(_mm512_div_pd(half(sum2), length), _mm512_mul_pd(offset, offset)));
}

// The means and biased variances of planes x, x + HW, ... (`planes` <= WIDTH of them), as run_moments gives them.
template <typename T>
void plane_group_mean_var(const T* x, i64 HW, i64 planes, double* mean_out, double* var_out) {
    __m512 sum1, sum2, k;
    plane_group_sums(x, HW, planes, sum1, sum2, k);
    for (int h = 0; h < 2; h++) {
        __m512d mean, var;
        half_mean_var(sum1, sum2, k, HW, h, mean, var);
        _mm512_mask_storeu_pd(mean_out + 8 * h, lanes::first_of_half(planes, h), mean);
        _mm512_mask_storeu_pd(var_out + 8 * h, lanes::first_of_half(planes, h), var);
    }
}
#endif

// Per-(n, c) mean and biased variance of NCHW planes on lanes (plane_group_mean_var), where b_on_lanes_applies:
// WIDTH planes at a time, where GCC's loop took two horizontal sums a plane.
template <typename T, typename A>
void plane_moments_on_lanes(const T* x, const Shape& s, double* mean, double* var) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T> && std::is_same_v<A, float>) {
        const i64 NC = s.N * s.C, groups = (NC + lanes::WIDTH - 1) / lanes::WIDTH;
        for_each_index(groups, lanes::WIDTH * s.HW, [&](i64 i) {
            const i64 nc = i * lanes::WIDTH;
            plane_group_mean_var(x + nc * s.HW, s.HW, std::min(lanes::WIDTH, NC - nc), mean + nc, var + nc);
        });
    }
#endif
}

// Per-(n, c) mean and biased variance: NCHW plane by plane (on lanes where b_on_lanes_applies), channels_last a
// sample's slab at a time.
template <typename T, typename A>
void plane_moments(const T* x, const Shape& s, std::vector<double>& mean, std::vector<double>& var) {
    mean.resize(s.N * s.C);
    var.resize(s.N * s.C);
    if (!s.nhwc && b_on_lanes_applies<T, A>(s.HW)) {
        plane_moments_on_lanes<T, A>(x, s, mean.data(), var.data());
        return;
    }
    if (!s.nhwc) {
        for_each_index(s.N * s.C, s.HW, [&](i64 nc) { run_moments<T, A>(x + nc * s.HW, s.HW, mean[nc], var[nc]); });
        return;
    }
    at::parallel_for(0, s.N, grain(s.HW * s.C), [&](i64 begin, i64 end) {
        SampleMoments<T, A> moments(s.C);
        for (i64 n = begin; n < end; n++) moments(x, s, n, mean.data(), var.data());
    });
}


// Copy `v` into the dense tensor `t` (any floating dtype).
void fill(Tensor& t, const std::vector<double>& v) {
    TORCH_CHECK(t.is_contiguous() && static_cast<size_t>(t.numel()) == v.size(), "evonorm: internal size mismatch");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "evonorm_fill", [&] {
        scalar_t* p = t.data_ptr<scalar_t>();
        for_each_index(static_cast<i64>(v.size()), 4, [&](i64 i) { p[i] = static_cast<scalar_t>(v[i]); });
    });
}

Tensor nc_tensor(const std::vector<double>& v, at::IntArrayRef sizes, const at::TensorOptions& options) {
    Tensor t = at::empty(sizes, options);
    fill(t, v);
    return t;
}

// The statistics arrive as contiguous float32 or float64 and are read in place: a converted copy (to(kDouble))
// was four tensor allocations and copies per call, host time that bounds the small layers of MobileNetV2.
std::vector<double> as_double(const Tensor& t) {
    if (!t.is_contiguous() || (t.scalar_type() != at::kFloat && t.scalar_type() != at::kDouble))
        return as_double(t.to(at::kDouble).contiguous());
    return AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "evonorm_as_double", [&] {
        const scalar_t* p = t.const_data_ptr<scalar_t>();
        return std::vector<double>(p, p + t.numel());
    });
}

// n doubles, not zeroed (for per-(n, c) results that the kernels write in full: zeroing them first was a
// serial memset of up to 1.3 MB per call at ResNet-50's 2048 x 7 x 7 stage).
std::unique_ptr<double[]> uninitialized(i64 n) { return std::unique_ptr<double[]>(new double[n]); }

// Per channel c, the sum over the batch of term(n, c): read sample by sample (sequential, vectorized), not channel
// by channel (a stride of C values, a cache line and at C = 2048 a page per read).
template <typename Term>
std::vector<double> sum_over_batch(i64 N, i64 C, Term term) {
    std::vector<double> out(C, 0.0);
    double* __restrict o = out.data();
    for (i64 n = 0; n < N; n++)
        for (i64 c = 0; c < C; c++) o[c] += term(n, c);
    return out;
}

// The gradient of a per-channel or per-sample parameter from its per-(n, c) sums.
Tensor param_grad(const double* per_nc_sum, const Tensor& like, i64 N, i64 C) {
    if (like.dim() == 2) return nc_tensor(std::vector<double>(per_nc_sum, per_nc_sum + N * C), {N, C}, like.options());
    return nc_tensor(sum_over_batch(N, C, [&](i64 n, i64 c) { return per_nc_sum[n * C + c]; }), {C}, like.options());
}

void check_input(const Tensor& x, const char* op) {
    TORCH_CHECK(x.dim() == 4, op, ": expected an NCHW tensor, got ", x.dim(), " dims");
    TORCH_CHECK(at::isFloatingType(x.scalar_type()), op, ": expected a floating-point tensor, got ", x.scalar_type());
    // the kernels read each run's first value (the shift of its moments); the layers never pass an empty input
    TORCH_CHECK(x.numel() > 0, op, ": expected a non-empty tensor, got shape ", x.sizes());
}

// The sizes of the other tensors, checked before the kernels read them (a wrong size would read out of bounds).
void check_numel(const Tensor& t, i64 numel, const char* op, const char* name) {
    TORCH_CHECK(t.numel() == numel, op, ": ", name, " must have ", numel, " elements, got shape ", t.sizes());
}

// weight and bias: absent, per channel (C,) or per sample (N, C)
void check_params(const Shape& s, const char* op,
                  std::initializer_list<std::pair<const char*, const std::optional<Tensor>*>> params) {
    for (const auto& [name, t] : params) {
        if (!t->has_value()) continue;
        const Tensor& p = t->value();
        TORCH_CHECK((p.dim() == 1 && p.size(0) == s.C) || (p.dim() == 2 && p.size(0) == s.N && p.size(1) == s.C), op,
                    ": ", name, " must be (C,) = (", s.C, ",) or (N, C) = (", s.N, ", ", s.C, "), got shape ", p.sizes());
    }
}

// v1: absent or per channel (C,); the kernels read one value per channel
void check_v1(const Shape& s, const char* op, const std::optional<Tensor>& v1) {
    if (v1.has_value())
        TORCH_CHECK(v1->dim() == 1 && v1->size(0) == s.C, op, ": v1 must be (C,) = (", s.C, ",), got shape ", v1->sizes());
}

void check_grad(const Tensor& grad, const Tensor& x, const char* op) {
    TORCH_CHECK(grad.sizes() == x.sizes(), op, ": grad must have x's shape ", x.sizes(), ", got ", grad.sizes());
}

void check_groups(i64 groups, i64 C, const char* op) {
    TORCH_CHECK(groups > 0 && C % groups == 0, op, ": groups=", groups, " does not divide C=", C);
}

void check_variant(int64_t variant, const char* op) {
    TORCH_CHECK(variant >= 0 && variant <= 2, op, ": variant must be 0, 1 or 2, got ", variant);
}

Tensor empty_vector() { return at::empty({0}, at::TensorOptions().dtype(at::kFloat)); }

// ============================== S series ==============================================
// NCHW planes of at most this many values take the S operators' paths over a group's run of planes at once.
constexpr i64 SMALL_PLANE = 63;
// The S forward takes that path from this many samples: the three expansions it writes per group are paid back
// over the group's samples. One thread, 2048 channels at 7x7 in 32 groups: 1.17x the per-plane forward's time at 1
// sample, even at 2, 0.90x at 4, 0.83x at 8 (docs/results/kernel_probes/s_forward_runs/threshold.txt).
constexpr i64 RUN_SAMPLES = 4;

// out[i HW + j] = values[i], j < HW, for the planes of a group's run: a per-channel value expanded along it.
template <typename A>
void expand_planes(A* __restrict out, const A* __restrict values, i64 planes, i64 HW) {
    for (i64 i = 0; i < planes; i++) std::fill(out + i * HW, out + (i + 1) * HW, values[i]);
}

// y = x sigmoid(v x) a + b over one NCHW plane (a = gamma r).
template <typename T, typename A>
void s_output_plane(const T* __restrict x, T* __restrict y, i64 HW, A v, A a, A b) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T>) {
        const __m512 vv = lanes::splat(v), av = lanes::splat(a), bv = lanes::splat(b);
        lanes::for_vectors(HW, [&](i64 j, lanes::Mask m) {
            const __m512 xj = lanes::load(x + j, m);
            lanes::store(y + j, m, _mm512_fmadd_ps(_mm512_mul_ps(xj, lanes::sigmoid(_mm512_mul_ps(vv, xj))), av, bv));
        });
        return;
    }
#endif
    for (i64 i = 0; i < HW; i++) {
        const A xi = static_cast<A>(x[i]);
        y[i] = static_cast<T>(xi * sigmoid(v * xi) * a + b);
    }
}

// y = x sigmoid(v x) w r + b over a group's run of C/G planes, v, w and b expanded along it: one loop over the
// run, where plane by plane a plane of 49 values (7 x 7) is three vector iterations and a scalar one.
template <typename T, typename A>
void s_output_run(const T* __restrict x, T* __restrict y, i64 L, const A* __restrict v, const A* __restrict w,
                  const A* __restrict b, A r) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T>) {
        const __m512 rv = lanes::splat(r);
        lanes::for_vectors(L, [&](i64 j, lanes::Mask m) {
            const __m512 xj = lanes::load(x + j, m), gate = lanes::sigmoid(_mm512_mul_ps(lanes::load(v + j, m), xj));
            const __m512 scale = _mm512_mul_ps(lanes::load(w + j, m), rv);
            lanes::store(y + j, m, _mm512_fmadd_ps(_mm512_mul_ps(xj, gate), scale, lanes::load(b + j, m)));
        });
        return;
    }
#endif
    for (i64 j = 0; j < L; j++) {
        const A xj = static_cast<A>(x[j]);
        y[j] = static_cast<T>(xj * sigmoid(v[j] * xj) * (w[j] * r) + b[j]);
    }
}

// channels_last S series: one task per sample, whose HW x C values are one contiguous slab (rows of C
// channels): the per-channel sums, then the output or dx while the slab is still in cache. Tasks of a few
// channels instead would stride the rows by C (a power of two): the rows would share a few cache sets.

// y = x sigmoid(v x) a + b over a slab's HW rows of C channels (a, b: the sample's per-channel values), each row
// as a run of s_output_run's with r = 1.
template <typename T, typename A>
void s_output_slab(const T* x, T* y, i64 HW, i64 C, const A* v, const A* a, const A* b) {
    for (i64 i = 0; i < HW; i++) s_output_run<T, A>(x + i * C, y + i * C, C, v, a, b, A(1));
}

// y = x sigmoid(v x) r gamma + beta, r = (m2 + eps)^-1/2 per (n, group), m2 the group
// variance (centered) or mean square. Returns (y, group mean (N, G), r (N, G)).
std::tuple<Tensor, Tensor, Tensor> s_forward(const Tensor& x_in, const std::optional<Tensor>& weight,
                                             const std::optional<Tensor>& bias, const std::optional<Tensor>& v1,
                                             int64_t groups, double eps, bool centered) {
    check_input(x_in, "evonorm::s_forward");
    const Tensor x = dense(x_in);
    const Shape s = rows_shape_of(x);
    check_groups(groups, s.C, "evonorm::s_forward");
    check_params(s, "evonorm::s_forward", {{"weight", &weight}, {"bias", &bias}});
    check_v1(s, "evonorm::s_forward", v1);
    const i64 G = groups, Cg = s.C / G;
    const auto stats = x.options().dtype(acc_dtype(x));
    Tensor y = empty_like_layout(x, x.scalar_type());
    Tensor mean_t = at::empty({s.N, G}, stats), rstd_t = at::empty({s.N, G}, stats);
    std::vector<double> mean(s.N * G), rstd(s.N * G);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "evonorm_s_forward", [&] {
        using A = typename AccOf<scalar_t>::type;
        const scalar_t* xp = x.const_data_ptr<scalar_t>();
        scalar_t* yp = y.data_ptr<scalar_t>();
        const PerNC<A> w(weight, s.C, A(1)), b(bias, s.C, A(0)), v(v1, s.C, A(1));
        auto rstd_of = [&](double m, double var) { return 1.0 / std::sqrt((centered ? var : var + m * m) + eps); };
        if (!s.nhwc) {
            // One task per (n, group): the group's C/G planes are one contiguous run; its moments, then its
            // output while the run is still in cache, so x is read from memory once, not twice. Small planes with
            // per-channel parameters and at least RUN_SAMPLES samples take the tasks group by group, each thread
            // expanding v, gamma and beta along the group's run once per group it meets, for s_output_run.
            const i64 L = Cg * s.HW;
            const bool runs = s.HW <= SMALL_PLANE && s.N >= RUN_SAMPLES && !w.per_sample() && !b.per_sample();
            at::parallel_for(0, s.N * G, grain(L), [&](i64 begin, i64 end) {
                std::vector<A> expanded(runs ? 3 * L : 0);  // v, gamma, beta along the group's run
                A* const e = expanded.data();
                i64 expanded_group = -1;
                for (i64 task = begin; task < end; task++) {
                    const i64 n = runs ? task % s.N : task / G, gi = runs ? task / s.N : task % G;
                    const i64 ng = n * G + gi, c0 = gi * Cg;
                    if (runs && gi != expanded_group) {
                        expand_planes(e, v.row(0) + c0, Cg, s.HW);
                        expand_planes(e + L, w.row(0) + c0, Cg, s.HW);
                        expand_planes(e + 2 * L, b.row(0) + c0, Cg, s.HW);
                        expanded_group = gi;
                    }
                    on_run<A>(xp + ng * L, yp + ng * L, L, s.HW < WIDEN_BELOW, [&](const auto* xr, auto* yr) {
                        using U = std::remove_cv_t<std::remove_pointer_t<decltype(xr)>>;
                        double var;
                        run_moments<U, A>(xr, L, mean[ng], var);
                        rstd[ng] = rstd_of(mean[ng], var);
                        const A r = static_cast<A>(rstd[ng]);
                        if (runs) {
                            s_output_run<U, A>(xr, yr, L, e, e + L, e + 2 * L, r);
                        } else {
                            for (i64 c = c0; c < c0 + Cg; c++)
                                s_output_plane<U, A>(xr + (c - c0) * s.HW, yr + (c - c0) * s.HW,
                                                     s.HW, v(0, c), w(n, c) * r, b(n, c));
                        }
                    });
                }
            });
            return;
        }
        at::parallel_for(0, s.N, grain(s.HW * s.C), [&](i64 begin, i64 end) {
            std::vector<A> k(s.C), acc(2 * s.C), a(s.C);
            std::vector<double> s1(s.C), s2(s.C);
            for (i64 n = begin; n < end; n++) {
                const scalar_t* slab = xp + n * s.HW * s.C;
                slab_moments<scalar_t, A>(slab, s.HW, s.C, group_rows(s, sizeof(scalar_t)), k, acc, s1, s2);
                for (i64 gi = 0; gi < G; gi++) {  // the group's moments from its channels' (Chan's formula)
                    double mu = 0, spread = 0;
                    for (i64 c = gi * Cg; c < (gi + 1) * Cg; c++) mu += k[c] + s1[c] / s.HW;
                    mu /= Cg;
                    for (i64 c = gi * Cg; c < (gi + 1) * Cg; c++) {
                        const double offset = s1[c] / s.HW, m = k[c] + offset;
                        spread += std::max(s2[c] / s.HW - offset * offset, 0.0) + (m - mu) * (m - mu);
                    }
                    mean[n * G + gi] = mu;
                    rstd[n * G + gi] = rstd_of(mu, spread / Cg);
                    for (i64 c = gi * Cg; c < (gi + 1) * Cg; c++) a[c] = w(n, c) * static_cast<A>(rstd[n * G + gi]);
                }
                s_output_slab<scalar_t, A>(slab, yp + n * s.HW * s.C, s.HW, s.C, v.row(0), a.data(), b.row(n));
            }
        });
    });
    fill(mean_t, mean);
    fill(rstd_t, rstd);
    return {y, mean_t, rstd_t};
}

// Over P consecutive NCHW planes with s = sigmoid(v x): per plane t = (sum g x s, sum g, sum g x^2 s (1 - s)),
// and s into sig. The planes' loops are one loop: at small planes each plane's own dependency chains (the
// sigmoid's division, the sums' reductions at its end) would otherwise leave the core waiting, plane after plane.
template <int P, typename T, typename A>
void s_plane_sums(const T* __restrict x, const T* __restrict g, A* __restrict sig, i64 HW, const A* v,
                  std::array<double, 3>* t) {
    for (int p = 0; p < P; p++) t[p] = {0, 0, 0};
#if defined(__AVX512F__)
    // Planes of more than BLOCK values one at a time on 16 lanes (lanes::sigmoid): a block is enough
    // independent work that interleaving the planes adds nothing.
    if constexpr (lanes::native<T>) {
        if (HW > BLOCK) {
            for (int p = 0; p < P; p++)
                for (i64 j0 = 0; j0 < HW; j0 += BLOCK) {
                    __m512 sums[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
                    const __m512 vp = lanes::splat(v[p]);
                    lanes::for_vectors(std::min(BLOCK, HW - j0), [&](i64 j, lanes::Mask m) {
                        const i64 o = p * HW + j0 + j;
                        const __m512 xj = lanes::load(x + o, m), gj = lanes::load(g + o, m);  // 0 past the end: adds 0
                        const __m512 sj = lanes::sigmoid(_mm512_mul_ps(vp, xj)), f = _mm512_mul_ps(gj, _mm512_mul_ps(xj, sj));
                        lanes::store(sig + o, m, sj);
                        sums[0] = _mm512_add_ps(sums[0], f);
                        sums[1] = _mm512_add_ps(sums[1], gj);
                        sums[2] = _mm512_add_ps(sums[2], _mm512_mul_ps(_mm512_mul_ps(f, xj), _mm512_sub_ps(lanes::splat(1.0f), sj)));
                    });
                    for (int k = 0; k < 3; k++) t[p][k] += _mm512_reduce_add_ps(sums[k]);
                }
            return;
        }
    }
#endif
    for (i64 j0 = 0; j0 < HW; j0 += BLOCK) {
        const i64 j1 = std::min(j0 + BLOCK, HW);
        A b0[P] = {}, b1[P] = {}, b2[P] = {};
        for (i64 j = j0; j < j1; j++) {
#pragma GCC unroll 8
            for (int p = 0; p < P; p++) {
                const i64 o = p * HW + j;
                const A xj = static_cast<A>(x[o]), gj = static_cast<A>(g[o]), sj = sigmoid(v[p] * xj), f = gj * xj * sj;
                sig[o] = sj;
                b0[p] += f;
                b1[p] += gj;
                b2[p] += f * xj * (A(1) - sj);
            }
        }
        for (int p = 0; p < P; p++) {
            t[p][0] += b0[p];
            t[p][1] += b1[p];
            t[p][2] += b2[p];
        }
    }
}

// dx = g a s (1 + v x (1 - s)) + k x + k0 over one NCHW plane, s from s_plane_sums.
template <typename T, typename A>
void s_input_grad_plane(const T* __restrict x, const T* __restrict g, const A* __restrict sig, T* __restrict dx, i64 HW,
                        A v, A a, A k, A k0) {
    for (i64 j = 0; j < HW; j++) {
        const A xj = static_cast<A>(x[j]), sj = sig[j];
        dx[j] = static_cast<T>(static_cast<A>(g[j]) * a * sj * (A(1) + v * xj * (A(1) - sj)) + k * xj + k0);
    }
}

// The NCHW S backward's two passes over a whole (n, group) run of C/G planes of WIDTH to BLOCK values as
// one array of vectors (lanes::for_run_vectors): plane by plane, a plane of 49 values (7 x 7) is four vectors, one
// of them for a single value, where the run takes 3.06 a plane. Each returns false and does nothing where it does
// not apply (another dtype or plane size, no AVX-512): the per-plane loops run then.

// s_plane_sums over the run: t[i] = (sum g x s, sum g, sum g x^2 s (1 - s)) of plane i, s = sigmoid(v_i x) into sig.
// A plane's sums stay in float32 lanes (at most BLOCK values, as the per-plane loops' blocks), then double.
template <typename T, typename A>
bool s_run_plane_sums(const T* __restrict x, const T* __restrict g, A* __restrict sig, i64 planes, i64 HW,
                      const A* __restrict v, std::array<double, 3>* t) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T>) {
        if (HW < lanes::WIDTH || HW > BLOCK) return false;
        __m512 here_sums[3], next_sums[3];  // of plane p and of the lanes already in plane p + 1
        for (int k = 0; k < 3; k++) here_sums[k] = next_sums[k] = _mm512_setzero_ps();
        lanes::PlaneValues vs(v, planes);
        lanes::for_run_vectors(planes * HW, HW, [&](i64 j, lanes::Mask here, lanes::Mask valid) {
            const __m512 xj = lanes::load(x + j, valid), gj = lanes::load(g + j, valid);  // 0 past the run: adds 0
            const __m512 sj = lanes::sigmoid(_mm512_mul_ps(vs.at(here), xj));
            const __m512 f = _mm512_mul_ps(gj, _mm512_mul_ps(xj, sj));
            lanes::store(sig + j, valid, sj);
            const __m512 terms[3] = {f, gj, _mm512_mul_ps(_mm512_mul_ps(f, xj), _mm512_sub_ps(lanes::splat(1.0f), sj))};
            if (here == lanes::ALL) {
                for (int k = 0; k < 3; k++) here_sums[k] = _mm512_add_ps(here_sums[k], terms[k]);
                return;
            }
            for (int k = 0; k < 3; k++) {
                here_sums[k] = _mm512_mask_add_ps(here_sums[k], here, here_sums[k], terms[k]);
                next_sums[k] = _mm512_mask_add_ps(next_sums[k], lanes::Mask(~here), next_sums[k], terms[k]);
            }
        }, [&](i64 p) {
            vs.next(p);
            for (int k = 0; k < 3; k++) {
                t[p][k] = _mm512_reduce_add_ps(here_sums[k]);
                here_sums[k] = next_sums[k];
                next_sums[k] = _mm512_setzero_ps();
            }
        });
        return true;
    }
#endif
    return false;
}

// s_input_grad_plane over the run: dx = g a_i s (1 + v_i x (1 - s)) + k x + k0 in plane i, s from s_run_plane_sums.
template <typename T, typename A>
bool s_run_plane_input_grad(const T* __restrict x, const T* __restrict g, const A* __restrict sig, T* __restrict dx,
                            i64 planes, i64 HW, const A* __restrict v, const A* __restrict a, A k, A k0) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T>) {
        if (HW < lanes::WIDTH || HW > BLOCK) return false;
        const __m512 one = lanes::splat(1.0f), kv = lanes::splat(k), k0v = lanes::splat(k0);
        lanes::PlaneValues vs(v, planes), as(a, planes);
        lanes::for_run_vectors(planes * HW, HW, [&](i64 j, lanes::Mask here, lanes::Mask valid) {
            const __m512 xj = lanes::load(x + j, valid), sj = lanes::load(sig + j, valid);
            const __m512 slope = _mm512_fmadd_ps(_mm512_mul_ps(vs.at(here), xj), _mm512_sub_ps(one, sj), one);
            const __m512 gas = _mm512_mul_ps(_mm512_mul_ps(lanes::load(g + j, valid), as.at(here)), sj);
            lanes::store(dx + j, valid, _mm512_fmadd_ps(gas, slope, _mm512_fmadd_ps(kv, xj, k0v)));
        }, [&](i64 p) {
            vs.next(p);
            as.next(p);
        });
        return true;
    }
#endif
    return false;
}

// One row of s_slab_sums: s = sigmoid(v x) into sr, the three sums' terms added to b0, b1, b2. (A function with
// __restrict parameters: inline, with the gradient read through ChannelsLastRows, GCC ran the loops' scalar copy.)
template <typename T, typename A>
void s_row_sums(const T* __restrict xr, const T* __restrict gr, A* __restrict sr, i64 C, const A* __restrict v,
                A* __restrict b0, A* __restrict b1, A* __restrict b2) {
    sigmoids(xr, v, sr, C);
    for (i64 c = 0; c < C; c++) {  // a loop of its own: with the sigmoid in it, it did not vectorize
        const A xc = static_cast<A>(xr[c]), gc = static_cast<A>(gr[c]), sc = sr[c], f = gc * xc * sc;
        b0[c] += f;
        b1[c] += gc;
        b2[c] += f * xc * (A(1) - sc);
    }
}

// Per channel of a slab (HW rows of C): t = (sum g x s, sum g, sum g x^2 s (1 - s)) as t[k * C + c], and
// s = sigmoid(v x) into sig; A within blocks of BLOCK rows, double across blocks.
template <typename T, typename A>
void s_slab_sums(const T* x, const T* g, A* sig, i64 HW, i64 C, const A* v, std::vector<A>& acc,
                 std::vector<double>& t) {
    std::fill(t.begin(), t.end(), 0.0);
    for (i64 i0 = 0; i0 < HW; i0 += BLOCK) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (i64 i = i0; i < std::min(i0 + BLOCK, HW); i++)
            s_row_sums(x + i * C, g + i * C, sig + i * C, C, v, acc.data(), acc.data() + C, acc.data() + 2 * C);
        for (i64 j = 0; j < 3 * C; j++) t[j] += acc[j];
    }
}

// dx = g a s (1 + v x (1 - s)) + k x + k0 over one row of C channels, s from s_slab_sums.
template <typename T, typename A>
void s_input_grad_row(const T* __restrict x, const T* __restrict g, const A* __restrict sig, T* __restrict dx, i64 C,
                      const A* __restrict v, const A* __restrict a, const A* __restrict k, const A* __restrict k0) {
    for (i64 c = 0; c < C; c++) {
        const A xc = static_cast<A>(x[c]), sc = sig[c];
        dx[c] = static_cast<T>(static_cast<A>(g[c]) * a[c] * sc * (A(1) + v[c] * xc * (A(1) - sc)) + k[c] * xc + k0[c]);
    }
}

// NCHW planes of at most SMALL_PLANE values in runs (C/G planes) of at most SMALL_RUN take
// s_backward_small_planes: a run's nine arrays (x, g, dx and six of its own) then stay within 36 KiB, about L1.
// The operator alone was 1.1-2.5x faster there (docs/results/kernel_probes/s_small_planes/op.txt); in the
// development probes longer runs were up to 1.5x slower (16x2048x7x7) and 8x8 planes no faster (docs/benchmarks.md).
constexpr i64 SMALL_RUN = 1024;

// Per-channel sums of the S backward's parameter gradients: dgamma = sum g x s r, dbeta = sum g and
// sum g x^2 s (1 - s) r (dv without its factor gamma), each over (n, hw).
struct SParamSums {
    std::vector<double> dgamma, dbeta, dv;
};

// One sample's run of the small-plane S backward (v, w: the channel's v and gamma per element): s = sigmoid(v x)
// into sig, e0 += r g x s, e1 += g, e2 += r g x^2 s (1 - s); returns sum w g x s (dr).
template <typename T, typename A>
double s_run_sums(const T* __restrict x, const T* __restrict g, const A* __restrict v, const A* __restrict w,
                  A* __restrict sig, A* __restrict e0, A* __restrict e1, A* __restrict e2, i64 L, A r) {
    sigmoids(x, v, sig, L);
    double dr = 0;
    for (i64 j0 = 0; j0 < L; j0 += BLOCK) {
        const i64 j1 = std::min(j0 + BLOCK, L);
        A block = 0;
        for (i64 j = j0; j < j1; j++) {  // a loop of its own: with the sigmoid in it, it did not vectorize
            const A xj = static_cast<A>(x[j]), gj = static_cast<A>(g[j]), sj = sig[j], f = gj * xj * sj;
            block += w[j] * f;
            e0[j] += r * f;
            e1[j] += gj;
            e2[j] += r * f * xj * (A(1) - sj);
        }
        dr += block;
    }
    return dr;
}

// dx = g w r s (1 + v x (1 - s)) + k x + k0 over one sample's run, s from s_run_sums.
template <typename T, typename A>
void s_run_input_grad(const T* __restrict x, const T* __restrict g, const A* __restrict sig, const A* __restrict v,
                      const A* __restrict w, T* __restrict dx, i64 L, A r, A k, A k0) {
    for (i64 j = 0; j < L; j++) {
        const A xj = static_cast<A>(x[j]), sj = sig[j];
        dx[j] = static_cast<T>(static_cast<A>(g[j]) * w[j] * r * sj * (A(1) + v[j] * xj * (A(1) - sj)) + k * xj + k0);
    }
}

// The NCHW S backward where planes are small and the parameters per channel. A group's run of C/G planes
// is one vectorized loop, v and gamma expanded along it, and the parameter gradients are summed per element
// across samples, reduced per channel every BLOCK / HW samples: no plane ends in reductions of its own, which
// were most of the backward at 4 x 4 (three per plane). One task per (group, chunk of those samples); the
// chunks' per-channel sums are added at the end. Writes dx; returns the per-channel sums.
template <typename T, typename A>
SParamSums s_backward_small_planes(const T* xp, const T* gp, T* dxp, const Shape& s, i64 G, const A* vp,
                                   const A* wp, const std::vector<double>& mean, const std::vector<double>& rstd,
                                   bool centered) {
    const i64 Cg = s.C / G, L = Cg * s.HW, samples = std::max<i64>(1, BLOCK / s.HW);
    const i64 chunks = (s.N + samples - 1) / samples;
    std::vector<double> partial(3 * chunks * s.C);  // [chunk][dgamma | dbeta | dv][C]
    const double M = static_cast<double>(L);
    at::parallel_for(0, G * chunks, grain(2 * L * std::min(samples, s.N)), [&](i64 begin, i64 end) {
        std::vector<A> scratch(6 * L);
        A *v = scratch.data(), *w = v + L, *sig = w + L, *e0 = sig + L, *e1 = e0 + L, *e2 = e1 + L;
        for (i64 task = begin; task < end; task++) {
            const i64 gi = task % G, chunk = task / G, c0 = gi * Cg;
            expand_planes(v, vp + c0, Cg, s.HW);
            expand_planes(w, wp + c0, Cg, s.HW);
            std::fill(e0, e0 + 3 * L, A(0));
            for (i64 n = chunk * samples; n < std::min(s.N, (chunk + 1) * samples); n++) {
                const i64 ng = n * G + gi, offset = ng * L;
                const T *x = xp + offset, *g = gp + offset;
                const A r = static_cast<A>(rstd[ng]);
                const double dr = s_run_sums<T, A>(x, g, v, w, sig, e0, e1, e2, L, r);
                const double k = -dr * rstd[ng] * rstd[ng] * rstd[ng] / M, k0 = centered ? -k * mean[ng] : 0.0;
                s_run_input_grad<T, A>(x, g, sig, v, w, dxp + offset, L, r, static_cast<A>(k), static_cast<A>(k0));
            }
            double* out = partial.data() + 3 * chunk * s.C + c0;
            for (i64 i = 0; i < Cg; i++) {
                A t0 = 0, t1 = 0, t2 = 0;
                for (i64 j = i * s.HW; j < (i + 1) * s.HW; j++) {
                    t0 += e0[j];
                    t1 += e1[j];
                    t2 += e2[j];
                }
                out[i] = t0;
                out[s.C + i] = t1;
                out[2 * s.C + i] = t2;
            }
        }
    });
    SParamSums sums{std::vector<double>(s.C, 0.0), std::vector<double>(s.C, 0.0), std::vector<double>(s.C, 0.0)};
    for (i64 chunk = 0; chunk < chunks; chunk++)
        for (i64 c = 0; c < s.C; c++) {
            sums.dgamma[c] += partial[3 * chunk * s.C + c];
            sums.dbeta[c] += partial[(3 * chunk + 1) * s.C + c];
            sums.dv[c] += partial[(3 * chunk + 2) * s.C + c];
        }
    return sums;
}

// With s = sigmoid(v x), r the group's rstd, M = C/G HW:
//   dgamma = sum_hw g x s r, dbeta = sum_hw g, dv = sum_{n,hw} g x^2 s (1 - s) r gamma,
//   dr = sum_{group,hw} g x s gamma, k = -dr r^3 / M,
//   dx = g r gamma (s + v x s (1 - s)) + k (x - mu)       (mu the group mean; 0 if not centered)
std::tuple<Tensor, Tensor, Tensor, Tensor> s_backward(const Tensor& grad_in, const Tensor& x_in,
                                                      const std::optional<Tensor>& weight,
                                                      const std::optional<Tensor>& bias,
                                                      const std::optional<Tensor>& v1, const Tensor& mean_t,
                                                      const Tensor& rstd_t, int64_t groups, bool centered,
                                                      std::array<bool, 3> mask) {
    const char* op = "evonorm::s_backward";
    check_input(x_in, op);
    check_grad(grad_in, x_in, op);
    const Tensor x = dense(x_in);
    const Shape s = shape_of(x);
    const Tensor g = grad_for(grad_in, x, s);
    check_groups(groups, s.C, op);
    check_params(s, op, {{"weight", &weight}, {"bias", &bias}});
    check_v1(s, op, v1);
    check_numel(mean_t, s.N * groups, op, "mean");
    check_numel(rstd_t, s.N * groups, op, "rstd");
    const i64 G = groups, Cg = s.C / G, NC = s.N * s.C;
    const std::vector<double> mean = as_double(mean_t), rstd = as_double(rstd_t);
    Tensor dx = empty_like_layout(x, x.scalar_type()), dweight, dbias, dv;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "evonorm_s_backward", [&] {
        using A = typename AccOf<scalar_t>::type;
        const scalar_t *xp = x.const_data_ptr<scalar_t>(), *gp = g.const_data_ptr<scalar_t>();
        const PerNC<A> v(v1, s.C, A(1)), w(weight, s.C, A(1));
        const A* vp = v.row(0);
        const bool need_dv = mask[2] && v1.has_value();
        scalar_t* dxp = dx.data_ptr<scalar_t>();
        const bool per_channel = !w.per_sample() && !(bias.has_value() && bias->dim() == 2);
        if (!s.nhwc && s.HW <= SMALL_PLANE && Cg * s.HW <= SMALL_RUN && per_channel) {
            SParamSums sums = s_backward_small_planes<scalar_t, A>(xp, gp, dxp, s, G, vp, w.row(0), mean, rstd, centered);
            if (mask[0] && weight.has_value()) dweight = nc_tensor(sums.dgamma, {s.C}, weight->options());
            if (mask[1] && bias.has_value()) dbias = nc_tensor(sums.dbeta, {s.C}, bias->options());
            if (need_dv) {
                for (i64 c = 0; c < s.C; c++) sums.dv[c] *= w(0, c);
                dv = nc_tensor(sums.dv, {s.C}, v1->options());
            }
            return;
        }
        const auto dgamma = uninitialized(NC), dbeta = uninitialized(NC), dvnc = uninitialized(need_dv ? NC : 0);
        const double M = static_cast<double>(Cg * s.HW);
        if (!s.nhwc) {
            // One task per (n, group) run: per plane the sums (s kept for dx), then dx while the run's x and g
            // are still in cache, so both are read from memory once and sigmoid is evaluated once. Both passes
            // take the run as one array of vectors where they can (s_run_plane_sums), else go plane by plane.
            const i64 L = Cg * s.HW;
            at::parallel_for(0, s.N * G, grain(2 * L), [&](i64 begin, i64 end) {
                std::vector<A> sig(L), a(Cg);
                std::vector<std::array<double, 3>> t(Cg);
                for (i64 ng = begin; ng < end; ng++) {
                    const double r = rstd[ng];
                    const i64 n = ng / G, c0 = (ng % G) * Cg, first = (n * s.C + c0) * s.HW;
                    const scalar_t *xr = xp + first, *gr = gp + first;
                    if (!s_run_plane_sums<scalar_t, A>(xr, gr, sig.data(), Cg, s.HW, vp + c0, t.data())) {
                        for (i64 i = 0; i < Cg;) {
                            const i64 o = i * s.HW;
                            A* const so = sig.data() + o;
                            if (Cg - i >= PLANES_AT_ONCE) {
                                s_plane_sums<PLANES_AT_ONCE, scalar_t, A>(xr + o, gr + o, so, s.HW, vp + c0 + i, &t[i]);
                                i += PLANES_AT_ONCE;
                            } else {
                                s_plane_sums<1, scalar_t, A>(xr + o, gr + o, so, s.HW, vp + c0 + i, &t[i]);
                                i++;
                            }
                        }
                    }
                    double dr = 0;
                    for (i64 i = 0; i < Cg; i++) {
                        const i64 c = c0 + i, nc = n * s.C + c;
                        dgamma[nc] = t[i][0] * r;
                        dbeta[nc] = t[i][1];
                        if (need_dv) dvnc[nc] = t[i][2] * w(n, c) * r;
                        dr += t[i][0] * w(n, c);
                        a[i] = static_cast<A>(w(n, c) * r);
                    }
                    const double dk = -dr * r * r * r / M;
                    const A k = static_cast<A>(dk), k0 = static_cast<A>(centered ? -dk * mean[ng] : 0.0);
                    if (!s_run_plane_input_grad<scalar_t, A>(xr, gr, sig.data(), dxp + first, Cg, s.HW, vp + c0,
                                                             a.data(), k, k0))
                        for (i64 i = 0, o = 0; i < Cg; i++, o += s.HW)
                            s_input_grad_plane<scalar_t, A>(xr + o, gr + o, sig.data() + o, dxp + first + o, s.HW,
                                                            vp[c0 + i], a[i], k, k0);
                }
            });
        } else {
            at::parallel_for(0, s.N, grain(2 * s.HW * s.C), [&](i64 begin, i64 end) {
                std::vector<A> sig(s.HW * s.C), acc(3 * s.C), a(s.C), k(s.C), k0(s.C);
                std::vector<double> t(3 * s.C);
                ChannelsLastRows<scalar_t> grad_rows(g, s);
                for (i64 n = begin; n < end; n++) {
                    const i64 offset = n * s.HW * s.C;
                    const scalar_t* gs = grad_rows.rows(n, 0, s.HW);  // both passes read it: transposed once
                    s_slab_sums<scalar_t, A>(xp + offset, gs, sig.data(), s.HW, s.C, vp, acc, t);
                    for (i64 gi = 0; gi < G; gi++) {
                        const i64 ng = n * G + gi;
                        const double r = rstd[ng];
                        double dr = 0;
                        for (i64 c = gi * Cg; c < (gi + 1) * Cg; c++) {
                            const i64 nc = n * s.C + c;
                            dgamma[nc] = t[c] * r;
                            dbeta[nc] = t[s.C + c];
                            if (need_dv) dvnc[nc] = t[2 * s.C + c] * w(n, c) * r;
                            dr += t[c] * w(n, c);
                        }
                        const double kk = -dr * r * r * r / M, kk0 = centered ? -kk * mean[ng] : 0.0;
                        for (i64 c = gi * Cg; c < (gi + 1) * Cg; c++) {
                            a[c] = static_cast<A>(w(n, c) * r);
                            k[c] = static_cast<A>(kk);
                            k0[c] = static_cast<A>(kk0);
                        }
                    }
                    for (i64 i = 0; i < s.HW; i++)
                        s_input_grad_row<scalar_t, A>(xp + offset + i * s.C, gs + i * s.C, sig.data() + i * s.C,
                                                      dxp + offset + i * s.C, s.C, vp, a.data(), k.data(), k0.data());
                }
            });
        }
        if (mask[0] && weight.has_value()) dweight = param_grad(dgamma.get(), *weight, s.N, s.C);
        if (mask[1] && bias.has_value()) dbias = param_grad(dbeta.get(), *bias, s.N, s.C);
        if (need_dv) dv = param_grad(dvnc.get(), *v1, s.N, s.C);
    });
    auto or_empty = [](const Tensor& t) { return t.defined() ? t : empty_vector(); };
    return {dx, or_empty(dweight), or_empty(dbias), or_empty(dv)};
}

// ============================== B series ==============================================
// max(sb, u) by max_of's rule. An NCHW plane's loops have one sb, a scalar, for which GCC vectorizes max_of's
// sb != sb as a 16-lane mask assembled bit by bit in every plane (about a third of B0's NCHW inference at
// 16x2048x7x7): those loops are instantiated for SbNumber, sb checked once before them (sb_kind), where the plain
// comparison is the same (a NaN u still wins it). Channels_last rows, whose sb is an array, keep max_of.
template <bool SbNumber, typename A>
inline A b_denominator(A sb, A u) {
    return SbNumber ? (sb > u ? sb : u) : max_of(sb, u);
}

// Where the gradient reaching max(sb, u) goes, as in torch.maximum's backward: to the larger operand, to sb at a tie,
// and to both where either is NaN (so a NaN moving variance gives NaN gradients, as the composed formula does).
template <typename A>
inline bool grad_to_u(A sb, A u) {
    return !(sb >= u);
}
template <typename A>
inline bool grad_to_sb(A sb, A u) {
    return !(u > sb);
}

// f(std::true_type{}) when sb is a number, f(std::false_type{}) when it is NaN (the tag for the plane loops).
template <typename A, typename F>
inline void sb_kind(A sb, F&& f) {
    if (sb == sb)
        f(std::true_type{});
    else
        f(std::false_type{});
}

// y = x / max(sb, p x + q) w + b, the B series' output (w, b: the affine weight and bias).
template <bool SbNumber = false, typename A>
inline A b_output(A x, A sb, A p, A q, A w, A b) {
    return x / b_denominator<SbNumber>(sb, p * x + q) * w + b;
}

template <typename T, typename A, bool SbNumber>
void b_output_plane(const T* __restrict x, T* __restrict y, i64 HW, A sb, A p, A q, A w, A b,
                    std::bool_constant<SbNumber>) {
    for (i64 j = 0; j < HW; j++) y[j] = static_cast<T>(b_output<SbNumber>(static_cast<A>(x[j]), sb, p, q, w, b));
}

// p of a B-series plane: its channel's v1 (B0), its own q (B1) or -1 (B2).
template <typename A>
inline A b_slope(int64_t variant, const PerNC<A>& v, i64 c, A q) {
    return variant == 0 ? v(0, c) : (variant == 1 ? q : A(-1));
}

#if defined(__AVX512F__)
// Each lane's mean and q (B0: sqrt(var + eps); B1, B2: sqrt(mean of x^2 + eps)) from plane_group_sums' lanes, in
// double with the operations of run_moments and plane_q, into mean_out and q_out for the first `planes` lanes.
inline void plane_group_moments(__m512 sum1, __m512 sum2, __m512 k, i64 HW, i64 planes, int64_t variant, double eps,
                                float* mean_out, float* q_out) {
    __m256 means[2], qs[2];
    for (int h = 0; h < 2; h++) {  // lanes 8h .. 8h + 7
        __m512d mean, var;
        half_mean_var(sum1, sum2, k, HW, h, mean, var);
        const __m512d m2 = variant == 0 ? var : _mm512_add_pd(var, _mm512_mul_pd(mean, mean));
        means[h] = _mm512_cvtpd_ps(mean);
        qs[h] = _mm512_cvtpd_ps(_mm512_sqrt_pd(_mm512_add_pd(m2, _mm512_set1_pd(eps))));
    }
    lanes::store(mean_out, lanes::first(planes), lanes::join(means[0], means[1]));
    lanes::store(q_out, lanes::first(planes), lanes::join(qs[0], qs[1]));
}

// max(sb, u) on lanes by b_denominator's rule: a NaN sb (`number` false) is every lane's denominator (max_of); a number
// takes the plain max, which a NaN u wins (vmaxps returns its second operand).
inline __m512 b_denominator_on_lanes(__m512 sb, __m512 u, bool number) { return number ? _mm512_max_ps(sb, u) : sb; }

// y = x / max(sb, p x + q) w + b over one NCHW plane of HW values on lanes (b_denominator_on_lanes).
template <typename T>
void b_output_plane_on_lanes(const T* x, T* y, i64 HW, float sb, float p, float q, float w, float b) {
    const bool number = sb == sb;
    const __m512 sbv = lanes::splat(sb), pv = lanes::splat(p), qv = lanes::splat(q), wv = lanes::splat(w),
                 bv = lanes::splat(b);
    lanes::for_vectors(HW, [&](i64 j, lanes::Mask m) {
        const __m512 xj = lanes::load(x + j, m);
        const __m512 den = b_denominator_on_lanes(sbv, _mm512_fmadd_ps(pv, xj, qv), number);
        lanes::store(y + j, m, _mm512_fmadd_ps(_mm512_div_ps(xj, den), wv, bv));
    });
}
#endif

// The NCHW B output of planes nc0 .. nc1 - 1 on lanes (b_output_plane_on_lanes), their q given, where
// b_on_lanes_applies.
template <typename T, typename A>
void b_outputs_on_lanes(const T* x, T* y, i64 nc0, i64 nc1, const Shape& s, const A* sb, int64_t variant,
                        const PerNC<A>& v, const PerNC<A>& w, const PerNC<A>& b, const A* q) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T> && std::is_same_v<A, float>) {
        for (i64 nc = nc0; nc < nc1; nc++) {
            const i64 n = nc / s.C, c = nc % s.C;
            b_output_plane_on_lanes(x + nc * s.HW, y + nc * s.HW, s.HW, sb[c], b_slope(variant, v, c, q[nc]), q[nc],
                                    w(n, c), b(n, c));
        }
    }
#endif
}

// The NCHW B inference (a moving variance given: sb per channel) of planes nc0 .. nc1 - 1 on lanes, where
// b_on_lanes_applies: WIDTH planes at a time, their sums (plane_group_sums), their moments and q
// (plane_group_moments), then each plane's output. GCC's loops took two horizontal sums and a scalar mean, variance
// and square root per plane, about half of the call at 7 x 7, and bfloat16 went through float32 copies of the run
// (on_run); here it is loaded and stored in place.
template <typename T, typename A>
void b_inference_on_lanes(const T* x, T* y, i64 nc0, i64 nc1, const Shape& s, const A* sb, int64_t variant, double eps,
                          const PerNC<A>& v, const PerNC<A>& w, const PerNC<A>& b, A* mean_out, A* q_out) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T> && std::is_same_v<A, float>) {
        for (i64 g = nc0; g < nc1; g += lanes::WIDTH) {
            const i64 planes = std::min(lanes::WIDTH, nc1 - g);
            __m512 sum1, sum2, k;
            plane_group_sums(x + g * s.HW, s.HW, planes, sum1, sum2, k);
            plane_group_moments(sum1, sum2, k, s.HW, planes, variant, eps, mean_out + g, q_out + g);
            b_outputs_on_lanes(x, y, g, g + planes, s, sb, variant, v, w, b, q_out);
        }
    }
#endif
}

// R channels_last rows of C channels (sb, p, q, w, b: per channel).
template <i64 R, typename T, typename A>
void b_output_rows(const T* __restrict x, T* __restrict y, i64 C, const A* __restrict sb, const A* __restrict p,
                   const A* __restrict q, const A* __restrict w, const A* __restrict b) {
#pragma omp simd
    for (i64 c = 0; c < C; c++)
        for_each_row_of_group<R>([&](i64 r) {
            y[r * C + c] = static_cast<T>(b_output(static_cast<A>(x[r * C + c]), sb[c], p[c], q[c], w[c], b[c]));
        });
}

// y = x / max(sb, p x + q) gamma + beta with sb = sqrt(batch_var + eps) per channel and, per
// (n, c), B0: p = v1, q = sqrt(s2_wh + eps); B1: p = q = sqrt(mu_wh(x^2) + eps); B2: p = -1,
// q = sqrt(mu_wh(x^2) + eps). batch_var: given (eval: the moving average; synchronized
// training: the all-reduced variance), else the batch's own (biased) variance.
// Returns (y, instance mean (N, C), q (N, C), batch mean (C), batch var (C)); the last two
// are empty when batch_var was given.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> b_forward(const Tensor& x_in, const std::optional<Tensor>& weight,
                                                             const std::optional<Tensor>& bias,
                                                             const std::optional<Tensor>& v1,
                                                             const std::optional<Tensor>& batch_var_in,
                                                             int64_t variant, double eps) {
    const char* op = "evonorm::b_forward";
    check_input(x_in, op);
    check_variant(variant, op);
    const Tensor x = dense(x_in);
    const Shape s = rows_shape_of(x);
    check_params(s, op, {{"weight", &weight}, {"bias", &bias}});
    check_v1(s, op, v1);
    if (batch_var_in.has_value()) check_numel(*batch_var_in, s.C, op, "batch_var");
    const i64 NC = s.N * s.C;
    const bool given = batch_var_in.has_value();
    const auto stats = x.options().dtype(acc_dtype(x));
    Tensor y = empty_like_layout(x, x.scalar_type());
    Tensor mean_t = at::empty({s.N, s.C}, stats), q_t = at::empty({s.N, s.C}, stats);
    Tensor batch_mean_t = at::empty({given ? 0 : s.C}, stats), batch_var_t = at::empty({given ? 0 : s.C}, stats);
    std::vector<double> mean, var, batch_mean, batch_var;
    // With batch_var given (eval) a plane's output needs only its own moments: each plane (channels_last: each
    // sample, where there is a sample per thread) is read for its moments and then for its output while it is
    // in cache, one pass over memory instead of two.
    const bool per_plane = given && (!s.nhwc || s.N >= at::get_num_threads());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "evonorm_b_forward", [&] {
        using A = typename AccOf<scalar_t>::type;
        const scalar_t* xp = x.const_data_ptr<scalar_t>();
        if (per_plane) {
            mean.resize(NC);
            var.resize(NC);
        } else {
            plane_moments<scalar_t, A>(xp, s, mean, var);
        }
        if (given) {
            batch_var = as_double(*batch_var_in);
        } else {
            batch_mean = sum_over_batch(s.N, s.C, [&](i64 n, i64 c) { return mean[n * s.C + c] / s.N; });
            batch_var = sum_over_batch(s.N, s.C, [&](i64 n, i64 c) {
                const double d = mean[n * s.C + c] - batch_mean[c];
                return (var[n * s.C + c] + d * d) / s.N;
            });
        }
        std::vector<A> sb(s.C);
        for (i64 c = 0; c < s.C; c++) sb[c] = static_cast<A>(std::sqrt(batch_var[c] + eps));
        const PerNC<A> v(v1, s.C, A(1)), w(weight, s.C, A(1)), b(bias, s.C, A(0));
        A *mean_out = mean_t.data_ptr<A>(), *q_out = q_t.data_ptr<A>();
        // q of plane nc (also writes the mean and q outputs)
        auto plane_q = [&](i64 nc) {
            mean_out[nc] = static_cast<A>(mean[nc]);
            q_out[nc] = static_cast<A>(std::sqrt((variant == 0 ? var[nc] : var[nc] + mean[nc] * mean[nc]) + eps));
            return q_out[nc];
        };
        scalar_t* yp = y.data_ptr<scalar_t>();
        if (!s.nhwc) {
            // Runs of planes of about PLANE_RUN elements: (eval) their moments, then their q, then each plane's
            // output with its p and q in registers. Small planes (7 x 7) stay in L1 from the moments to the output,
            // and the run's sums and square roots, independent of each other, overlap instead of each plane's
            // output waiting on its own.
            const i64 run = std::max<i64>(1, PLANE_RUN / s.HW), runs = (NC + run - 1) / run;
            if (b_on_lanes_applies<scalar_t, A>(s.HW)) {
                for_each_index(runs, run * s.HW, [&](i64 r) {
                    const i64 nc0 = r * run, nc1 = std::min(NC, nc0 + run);
                    if (per_plane) {
                        b_inference_on_lanes(xp, yp, nc0, nc1, s, sb.data(), variant, eps, v, w, b, mean_out, q_out);
                        return;
                    }
                    for (i64 nc = nc0; nc < nc1; nc++) plane_q(nc);
                    b_outputs_on_lanes(xp, yp, nc0, nc1, s, sb.data(), variant, v, w, b, q_out);
                });
                return;
            }
            for_each_index(runs, run * s.HW, [&](i64 r) {
                const i64 nc0 = r * run, nc1 = std::min(NC, nc0 + run);
                const i64 L = (nc1 - nc0) * s.HW;
                on_run<A>(xp + nc0 * s.HW, yp + nc0 * s.HW, L, s.HW < WIDEN_BELOW, [&](const auto* xr, auto* yr) {
                    using U = std::remove_cv_t<std::remove_pointer_t<decltype(xr)>>;
                    if (per_plane)
                        for (i64 nc = nc0; nc < nc1; nc++)
                            run_moments<U, A>(xr + (nc - nc0) * s.HW, s.HW, mean[nc], var[nc]);
                    for (i64 nc = nc0; nc < nc1; nc++) plane_q(nc);
                    for (i64 nc = nc0; nc < nc1; nc++) {
                        const i64 n = nc / s.C, c = nc % s.C, at = (nc - nc0) * s.HW;
                        const A q = q_out[nc];
                        sb_kind(sb[c], [&](auto number) {
                            b_output_plane<U, A>(xr + at, yr + at, s.HW, sb[c], b_slope(variant, v, c, q), q, w(n, c),
                                                 b(n, c), number);
                        });
                    }
                });
            });
            return;
        }
        std::vector<A> p(NC);
        const bool grouped = group_rows(s, sizeof(scalar_t));
        if (per_plane) {  // a sample's moments, p and q, then its rows
            at::parallel_for(0, s.N, grain(s.HW * s.C), [&](i64 begin, i64 end) {
                SampleMoments<scalar_t, A> moments(s.C);
                for (i64 n = begin; n < end; n++) {
                    moments(xp, s, n, mean.data(), var.data());
                    const i64 nc0 = n * s.C;
                    for (i64 c = 0; c < s.C; c++) p[nc0 + c] = b_slope(variant, v, c, plane_q(nc0 + c));
                    for_row_groups(0, s.HW, grouped, [&](i64 i, auto R) {
                        const i64 off = (n * s.HW + i) * s.C;
                        b_output_rows<R, scalar_t, A>(xp + off, yp + off, s.C, sb.data(), p.data() + nc0, q_out + nc0,
                                                      w.row(n), b.row(n));
                    });
                }
            });
            return;
        }
        for_each_index(NC, 4, [&](i64 nc) { p[nc] = b_slope(variant, v, nc % s.C, plane_q(nc)); });
        const i64 tiles = (s.HW + TILE - 1) / TILE;  // per sample
        for_each_index(s.N * tiles, TILE * s.C, [&](i64 nt) {
            const i64 n = nt / tiles, i0 = (nt % tiles) * TILE;
            for_row_groups(i0, std::min(i0 + TILE, s.HW), grouped, [&](i64 i, auto R) {
                const i64 off = (n * s.HW + i) * s.C;
                b_output_rows<R, scalar_t, A>(xp + off, yp + off, s.C, sb.data(), p.data() + n * s.C, q_out + n * s.C,
                                              w.row(n), b.row(n));
            });
        });
    });
    if (!given) {
        fill(batch_mean_t, batch_mean);
        fill(batch_var_t, batch_var);
    }
    return {y, mean_t, q_t, batch_mean_t, batch_var_t};
}

// The per-(n, c) sums of b_backward's first pass: U, UX, B, G, GZ and X, the sum of x - k with k the plane's first
// value (see there; shifted so that near-constant planes keep their mean exact, as the forward's moments do).
constexpr int B_SUMS = 6;

// Adds element (x, g)'s terms to the six sums of b_backward (X only with SumX).
// (One division per element, its reciprocal, where the formulas divide twice: at 7 x 7 planes the divisions
// bound the B series' loops.)
template <bool SbNumber = false, bool SumX = true, typename A>
inline void add_b_terms(A x, A g, A sb, A p, A q, A w, A k, A& u_sum, A& ux_sum, A& b_sum, A& g_sum, A& gz_sum,
                        A& x_sum) {
    const A u = p * x + q, r = A(1) / b_denominator<SbNumber>(sb, u), z = x * r, dd = -g * w * z * r;
    // Both selects into values first, then plain sums: written as `sum += to_u ? dd : 0`, GCC turns the channels_last
    // loop's sums (arrays) into masked loads and stores (vmaskmovps), which took B0's backward at 2x256x56x56 to 2x NCHW's.
    const A du = grad_to_u(sb, u) ? dd : A(0), db = grad_to_sb(sb, u) ? dd : A(0);
    u_sum += du;
    ux_sum += du * x;
    b_sum += db;
    g_sum += g;
    gz_sum += g * z;
    if constexpr (SumX) x_sum += x - k;
}

// Adds R rows' terms to the per-channel sums of b_backward (add_b_terms) held in acc as acc[k * C + c]; `first`
// is the sample's first row (X's shift).
template <i64 R, bool SumX, typename T, typename A>
void add_b_rows(const T* __restrict x, const T* __restrict g, const T* __restrict first, i64 C, const A* __restrict sb,
                const A* __restrict p, const A* __restrict q, const A* __restrict w, A* __restrict acc) {
#pragma omp simd
    for (i64 c = 0; c < C; c++) {
        A u = 0, ux = 0, bs = 0, gs = 0, gz = 0, xs = 0;
        for_each_row_of_group<R>([&](i64 r) {
            add_b_terms<false, SumX>(static_cast<A>(x[r * C + c]), static_cast<A>(g[r * C + c]), sb[c], p[c], q[c],
                                     w[c], SumX ? static_cast<A>(first[c]) : A(0), u, ux, bs, gs, gz, xs);
        });
        acc[c] += u, acc[C + c] += ux, acc[2 * C + c] += bs, acc[3 * C + c] += gs, acc[4 * C + c] += gz;
        if constexpr (SumX) acc[5 * C + c] += xs;
    }
}

// The six per-channel sums of b_backward over channels_last sample n (HW rows of C; p, q, w the sample's
// per-channel values) into sums[k * stride + c]: A within blocks of BLOCK rows, double across blocks. (Summed into
// an array of the sample's and then copied, with a division by C per (n, c) in the loop of p and q, b_backward took
// 1.1-1.25x its time at MobileNetV2's 4x4 and 8x8 planes: docs/benchmarks.md, "The channels_last B backward's sums
// in place".)
// X is summed only with SumX (an empty mean): in channels_last its per-channel array and the first row's values
// are two more streams beside nine, which took b_backward at 2x1024x14x14 from 0.10-0.11 to 0.13 ms (a development
// run), so autograd keeps the mean for channels_last inputs and passes none only for NCHW ones.
template <typename T, typename A, bool SumX>
void b_slab_sums(const T* x, ChannelsLastRows<T>& g, i64 n, i64 HW, i64 C, bool grouped, const A* __restrict sb,
                 const A* __restrict p, const A* __restrict q, const A* __restrict w, std::vector<A>& acc,
                 double* __restrict sums, i64 stride, std::bool_constant<SumX>) {
    static_assert(BLOCK % TILE == 0, "a block is whole tiles");
    for (i64 i0 = 0; i0 < HW; i0 += BLOCK) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (i64 t0 = i0; t0 < std::min(i0 + BLOCK, HW); t0 += TILE) {
            const i64 rows = std::min(TILE, HW - t0);
            const T* tile = g.rows(n, t0, rows);
            for_row_groups(0, rows, grouped, [&](i64 i, auto R) {
                add_b_rows<R, SumX>(x + (t0 + i) * C, tile + i * C, x, C, sb, p, q, w, acc.data());
            });
        }
        for (int k = 0; k < B_SUMS; k++) {
            double* __restrict out = sums + k * stride;
            const A* __restrict in = acc.data() + k * C;
            if (i0 == 0)
                for (i64 c = 0; c < C; c++) out[c] = in[c];
            else
                for (i64 c = 0; c < C; c++) out[c] += in[c];
        }
    }
}

// The five sums of b_backward over one NCHW plane (p, q, w the plane's values): A within blocks of BLOCK
// elements, double across blocks.
template <typename T, typename A, bool SbNumber>
void b_plane_sums(const T* __restrict x, const T* __restrict g, i64 HW, A sb, A p, A q, A w, double (&t)[B_SUMS],
                  std::bool_constant<SbNumber>) {
    std::fill(t, t + B_SUMS, 0.0);
    const A k = static_cast<A>(x[0]);
    for (i64 j0 = 0; j0 < HW; j0 += BLOCK) {
        const i64 j1 = std::min(j0 + BLOCK, HW);
        A u_sum = 0, ux_sum = 0, b_sum = 0, g_sum = 0, gz_sum = 0, x_sum = 0;
        for (i64 j = j0; j < j1; j++) {
            const A xj = static_cast<A>(x[j]), gj = static_cast<A>(g[j]);
            add_b_terms<SbNumber>(xj, gj, sb, p, q, w, k, u_sum, ux_sum, b_sum, g_sum, gz_sum, x_sum);
        }
        t[0] += u_sum;
        t[1] += ux_sum;
        t[2] += b_sum;
        t[3] += g_sum;
        t[4] += gz_sum;
        t[5] += x_sum;
    }
}

// dx of the B series at one element: g w / d - [to u] g w x p / d^2 + k x + k0 (see b_backward, add_b_terms).
template <bool SbNumber = false, typename A>
inline A b_input_grad(A x, A g, A sb, A p, A q, A w, A k, A k0) {
    const A u = p * x + q, r = A(1) / b_denominator<SbNumber>(sb, u), gd = g * w * r;
    return gd - (grad_to_u(sb, u) ? gd * x * r * p : A(0)) + k * x + k0;
}

template <typename T, typename A, bool SbNumber>
void b_input_grad_plane(const T* __restrict x, const T* __restrict g, T* __restrict dx, i64 HW, A sb, A p, A q, A w, A k,
                        A k0, std::bool_constant<SbNumber>) {
    for (i64 j = 0; j < HW; j++)
        dx[j] = static_cast<T>(b_input_grad<SbNumber>(static_cast<A>(x[j]), static_cast<A>(g[j]), sb, p, q, w, k, k0));
}

#if defined(__AVX512F__)
// b_backward's six sums (add_b_terms) of NCHW planes nc0 .. nc0 + planes - 1 (planes <= WIDTH) on lanes, into
// sums[k * NC + nc]: each plane's sums stay in six vectors until the group's are folded at once (lanes::sums_of),
// where GCC's loop took six horizontal sums a plane (and c10's conversions element by element for bfloat16).
// Masked-off lanes (read as 0) add nothing; dd = -g w z r is subtracted as g w z r.
template <typename T>
void b_plane_group_sums(const T* x, const T* g, i64 nc0, i64 planes, const Shape& s, const float* sb, int64_t variant,
                        const PerNC<float>& v, const PerNC<float>& w, const double* q, double* sums) {
    const i64 NC = s.N * s.C;
    __m512 acc[B_SUMS][lanes::WIDTH];
    for (i64 i = 0; i < lanes::WIDTH; i++) {
        __m512 t[B_SUMS];
        for (auto& sum : t) sum = _mm512_setzero_ps();
        if (i < planes) {
            const i64 nc = nc0 + i, n = nc / s.C, c = nc % s.C;
            const T *xp = x + nc * s.HW, *gp = g + nc * s.HW;
            const float qn = static_cast<float>(q[nc]);
            const bool number = sb[c] == sb[c];
            const __m512 sbv = lanes::splat(sb[c]), pv = lanes::splat(b_slope(variant, v, c, qn)),
                         qv = lanes::splat(qn), wv = lanes::splat(w(n, c)),
                         kv = lanes::splat(static_cast<float>(xp[0])), one = lanes::splat(1.0f);
            lanes::for_vectors(s.HW, [&](i64 j, lanes::Mask m) {
                const __m512 xj = lanes::load(xp + j, m), gj = lanes::load(gp + j, m);
                const __m512 u = _mm512_fmadd_ps(pv, xj, qv);
                const __m512 r = _mm512_div_ps(one, b_denominator_on_lanes(sbv, u, number)), z = _mm512_mul_ps(xj, r);
                const __m512 gwzr = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(gj, wv), z), r);
                const lanes::Mask to_u = _mm512_mask_cmp_ps_mask(m, sbv, u, _CMP_NGE_UQ),  // grad_to_u
                    to_sb = _mm512_mask_cmp_ps_mask(m, u, sbv, _CMP_NGT_UQ);                // grad_to_sb
                t[0] = _mm512_mask_sub_ps(t[0], to_u, t[0], gwzr);
                t[1] = _mm512_mask3_fnmadd_ps(gwzr, xj, t[1], to_u);
                t[2] = _mm512_mask_sub_ps(t[2], to_sb, t[2], gwzr);
                t[3] = _mm512_add_ps(t[3], gj);
                t[4] = _mm512_mask3_fmadd_ps(gj, z, t[4], m);
                t[5] = _mm512_mask_add_ps(t[5], m, t[5], _mm512_sub_ps(xj, kv));
            });
        }
        for (int k = 0; k < B_SUMS; k++) acc[k][i] = t[k];
    }
    for (int k = 0; k < B_SUMS; k++) {
        const __m512 folded = lanes::sums_of(acc[k]);
        for (int h = 0; h < 2; h++) {
            const __m256 half = h ? lanes::upper(folded) : _mm512_castps512_ps256(folded);
            _mm512_mask_storeu_pd(sums + k * NC + nc0 + 8 * h, lanes::first_of_half(planes, h), _mm512_cvtps_pd(half));
        }
    }
}

// dx of one NCHW plane of HW values on lanes (b_input_grad).
template <typename T>
void b_input_grad_plane_on_lanes(const T* x, const T* g, T* dx, i64 HW, float sb, float p, float q, float w, float k,
                                 float k0) {
    const bool number = sb == sb;
    const __m512 sbv = lanes::splat(sb), pv = lanes::splat(p), qv = lanes::splat(q), wv = lanes::splat(w),
                 kv = lanes::splat(k), k0v = lanes::splat(k0), one = lanes::splat(1.0f);
    lanes::for_vectors(HW, [&](i64 j, lanes::Mask m) {
        const __m512 xj = lanes::load(x + j, m), gj = lanes::load(g + j, m);
        const __m512 u = _mm512_fmadd_ps(pv, xj, qv);
        const __m512 r = _mm512_div_ps(one, b_denominator_on_lanes(sbv, u, number));
        const __m512 gd = _mm512_mul_ps(_mm512_mul_ps(gj, wv), r);
        const __m512 toward_u =
            _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(sbv, u, _CMP_NGE_UQ), _mm512_mul_ps(_mm512_mul_ps(gd, xj), r), pv);
        lanes::store(dx + j, m, _mm512_add_ps(_mm512_fmadd_ps(kv, xj, _mm512_sub_ps(gd, toward_u)), k0v));
    });
}
#endif

// b_backward's sums of every NCHW plane on lanes (b_plane_group_sums), where b_on_lanes_applies.
template <typename T, typename A>
void b_sums_on_lanes(const T* x, const T* g, const Shape& s, const A* sb, int64_t variant, const PerNC<A>& v,
                     const PerNC<A>& w, const double* q, double* sums) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T> && std::is_same_v<A, float>) {
        const i64 NC = s.N * s.C, groups = (NC + lanes::WIDTH - 1) / lanes::WIDTH;
        for_each_index(groups, lanes::WIDTH * 2 * s.HW, [&](i64 i) {
            const i64 nc0 = i * lanes::WIDTH;
            b_plane_group_sums(x, g, nc0, std::min(lanes::WIDTH, NC - nc0), s, sb, variant, v, w, q, sums);
        });
    }
#endif
}

// b_backward's dx of every NCHW plane on lanes (b_input_grad_plane_on_lanes), where b_on_lanes_applies.
template <typename T, typename A>
void b_input_grad_on_lanes(const T* x, const T* g, T* dx, const Shape& s, const A* sb, int64_t variant,
                           const PerNC<A>& v, const PerNC<A>& w, const double* q, const A* k, const A* k0) {
#if defined(__AVX512F__)
    if constexpr (lanes::native<T> && std::is_same_v<A, float>) {
        for_each_index(s.N * s.C, 2 * s.HW, [&](i64 nc) {
            const i64 n = nc / s.C, c = nc % s.C, offset = nc * s.HW;
            const A qn = static_cast<A>(q[nc]);
            b_input_grad_plane_on_lanes(x + offset, g + offset, dx + offset, s.HW, sb[c], b_slope(variant, v, c, qn),
                                        qn, w(n, c), k[nc], k0[nc]);
        });
    }
#endif
}

// One channels_last row of C channels (every value per channel).
template <typename T, typename A>
void b_input_grad_row(const T* __restrict x, const T* __restrict g, T* __restrict dx, i64 C, const A* __restrict sb,
                      const A* __restrict p, const A* __restrict q, const A* __restrict w, const A* __restrict k,
                      const A* __restrict k0) {
    for (i64 c = 0; c < C; c++)
        dx[c] = static_cast<T>(
            b_input_grad(static_cast<A>(x[c]), static_cast<A>(g[c]), sb[c], p[c], q[c], w[c], k[c], k0[c]));
}

// One sample's k and k0 of b_backward's dx (k = dq' / (q HW) + k_b, k0 = -k mu_i - k_b mu_b, see there) from its
// per-channel sums U and UX, q, mean and the batch part kb, kb0: one vectorized loop (computed plane by plane,
// the two double divisions were most of the O(N C) work where planes are small: 4 x 4, 8 x 8).
template <typename A>
void b_input_grad_coefficients(const double* __restrict u, const double* __restrict ux, const double* __restrict q,
                               const double* __restrict mean, const double* __restrict kb,
                               const double* __restrict kb0, i64 C, i64 HW, int64_t variant, A* __restrict k,
                               A* __restrict k0) {
    const bool with_ux = variant == 1, centered = variant == 0;
    for (i64 c = 0; c < C; c++) {
        const double kk = (with_ux ? u[c] + ux[c] : u[c]) / (q[c] * static_cast<double>(HW));
        k[c] = static_cast<A>(kk + kb[c]);
        k0[c] = static_cast<A>((centered ? -kk * mean[c] : 0.0) + kb0[c]);
    }
}

// With d = max(sb, u), u = p x + q, z = x / d, dd = -g gamma z / d (the gradient reaching d),
// per (n, c): U = sum dd [to u], UX = sum dd x [to u], B = sum dd [to sb] (add_b_terms), G = sum g,
// GZ = sum g z. Then dgamma = GZ, dbeta = G, dv1 = UX (B0), and
//   dx = g gamma / d + [to u] dd p + k (x - mu_i) + k_b (x - mu_b)
// with k = dq' / (q HW) (dq' = U, or U + UX for B1 where p = q; mu_i the instance mean for
// B0, 0 for B1/B2), k_b = dsb / (sb N HW) when the batch statistics are x's own
// (batch_from_x), dsb = sum_n B; d batch_var = dsb / (2 sb) is returned for given ones. An empty mean is taken
// from x as X / HW, X = sum x from the same pass (autograd on the CPU keeps no mean: (N, C) floats a layer less).
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> b_backward(
    const Tensor& grad_in, const Tensor& x_in, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
    const std::optional<Tensor>& v1, const Tensor& mean_t, const Tensor& q_t, const Tensor& batch_mean_t, const Tensor& batch_var_t, int64_t variant,
    double eps, bool batch_from_x, std::array<bool, 4> mask) {
    const char* op = "evonorm::b_backward";
    check_input(x_in, op);
    check_grad(grad_in, x_in, op);
    check_variant(variant, op);
    const Tensor x = dense(x_in);
    const Shape s = rows_shape_of(x);
    const Tensor g = grad_for(grad_in, x, s);
    const i64 NC = s.N * s.C;
    check_params(s, op, {{"weight", &weight}, {"bias", &bias}});
    check_v1(s, op, v1);
    if (mean_t.numel() != 0) check_numel(mean_t, NC, op, "mean");  // empty: taken from x in the sums' pass
    check_numel(q_t, NC, op, "q");
    check_numel(batch_var_t, s.C, op, "batch_var");
    if (batch_from_x) check_numel(batch_mean_t, s.C, op, "batch_mean");
    const std::vector<double> q = as_double(q_t);
    std::vector<double> mean = mean_t.numel() != 0 ? as_double(mean_t) : std::vector<double>(NC);
    const std::vector<double> batch_var = as_double(batch_var_t);
    const std::vector<double> batch_mean = batch_from_x ? as_double(batch_mean_t) : std::vector<double>();
    Tensor dx = empty_like_layout(x, x.scalar_type()), dweight, dbias, dv, dbatch_var;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "evonorm_b_backward", [&] {
        using A = typename AccOf<scalar_t>::type;
        const scalar_t *xp = x.const_data_ptr<scalar_t>(), *gp = g.const_data_ptr<scalar_t>();
        std::vector<A> sb(s.C);
        std::vector<double> sbd(s.C);
        for (i64 c = 0; c < s.C; c++) sbd[c] = std::sqrt(batch_var[c] + eps), sb[c] = static_cast<A>(sbd[c]);
        const PerNC<A> v(v1, s.C, A(1)), w(weight, s.C, A(1));
        // sums: 0 U, 1 UX, 2 B, 3 G, 4 GZ, 5 X
        const auto sums = uninitialized(B_SUMS * NC);
        std::vector<A> p, qa;  // channels_last: per (n, c)
        const bool on_lanes = !s.nhwc && b_on_lanes_applies<scalar_t, A>(s.HW);
        if (on_lanes) {
            b_sums_on_lanes<scalar_t, A>(xp, gp, s, sb.data(), variant, v, w, q.data(), sums.get());
        } else if (!s.nhwc) {
            for_each_index(NC, 2 * s.HW, [&](i64 nc) {
                const i64 n = nc / s.C, c = nc % s.C;
                const A qn = static_cast<A>(q[nc]);
                double t[B_SUMS];
                sb_kind(sb[c], [&](auto number) {
                    b_plane_sums<scalar_t, A>(xp + nc * s.HW, gp + nc * s.HW, s.HW, sb[c], b_slope(variant, v, c, qn),
                                              qn, w(n, c), t, number);
                });
                for (int k = 0; k < B_SUMS; k++) sums[k * NC + nc] = t[k];
            });
        } else {
            p.resize(NC);
            qa.resize(NC);
            for_each_index(s.N, 4 * s.C, [&](i64 n) {
                for (i64 nc = n * s.C, c = 0; c < s.C; nc++, c++) {
                    qa[nc] = static_cast<A>(q[nc]);
                    p[nc] = b_slope(variant, v, c, qa[nc]);
                }
            });
            const bool grouped = group_rows(s, sizeof(scalar_t));
            at::parallel_for(0, s.N, grain(s.HW * s.C), [&](i64 begin, i64 end) {
                std::vector<A> acc(B_SUMS * s.C);
                ChannelsLastRows<scalar_t> grad_rows(g, s);
                for (i64 n = begin; n < end; n++) {
                    const i64 nc0 = n * s.C;
                    auto slab_sums = [&](auto sum_x) {
                        b_slab_sums<scalar_t, A>(xp + nc0 * s.HW, grad_rows, n, s.HW, s.C, grouped, sb.data(),
                                                 p.data() + nc0, qa.data() + nc0, w.row(n), acc, sums.get() + nc0, NC,
                                                 sum_x);
                    };
                    if (mean_t.numel() == 0)
                        slab_sums(std::true_type{});
                    else
                        slab_sums(std::false_type{});
                }
            });
        }
        if (mean_t.numel() == 0)  // k + X / HW, k the plane's first value (NCHW: x[nc HW]; channels_last: x[n HW C + c])
            for (i64 nc = 0; nc < NC; nc++) {
                const i64 first = s.nhwc ? (nc / s.C) * s.HW * s.C + nc % s.C : nc * s.HW;
                mean[nc] = static_cast<double>(static_cast<A>(xp[first])) + sums[5 * NC + nc] / s.HW;
            }
        const std::vector<double> dsb = sum_over_batch(s.N, s.C, [&](i64 n, i64 c) { return sums[2 * NC + n * s.C + c]; });
        // dx = ... + k x + k0, per (n, c)
        std::vector<double> kb(s.C, 0.0), kb0(s.C, 0.0);  // the batch statistics' part, per channel
        if (batch_from_x)
            for (i64 c = 0; c < s.C; c++) {
                kb[c] = dsb[c] / (sbd[c] * static_cast<double>(s.N * s.HW));
                kb0[c] = -kb[c] * batch_mean[c];
            }
        std::vector<A> k(NC), k0(NC);
        for_each_index(s.N, 8 * s.C, [&](i64 n) {
            const i64 nc0 = n * s.C;
            b_input_grad_coefficients(sums.get() + nc0, sums.get() + NC + nc0, q.data() + nc0, mean.data() + nc0,
                                      kb.data(), kb0.data(), s.C, s.HW, variant, k.data() + nc0, k0.data() + nc0);
        });
        scalar_t* dxp = dx.data_ptr<scalar_t>();
        if (on_lanes) {
            b_input_grad_on_lanes<scalar_t, A>(xp, gp, dxp, s, sb.data(), variant, v, w, q.data(), k.data(), k0.data());
        } else if (!s.nhwc) {
            for_each_index(NC, 2 * s.HW, [&](i64 nc) {
                const i64 n = nc / s.C, c = nc % s.C, offset = nc * s.HW;
                const A qn = static_cast<A>(q[nc]);
                sb_kind(sb[c], [&](auto number) {
                    b_input_grad_plane<scalar_t, A>(xp + offset, gp + offset, dxp + offset, s.HW, sb[c],
                                                    b_slope(variant, v, c, qn), qn, w(n, c), k[nc], k0[nc], number);
                });
            });
        } else {
            const i64 tiles = (s.HW + TILE - 1) / TILE;  // per sample
            at::parallel_for(0, s.N * tiles, grain(TILE * s.C), [&](i64 begin, i64 end) {
                ChannelsLastRows<scalar_t> grad_rows(g, s);
                for (i64 nt = begin; nt < end; nt++) {
                    const i64 n = nt / tiles, i0 = (nt % tiles) * TILE, rows = std::min(TILE, s.HW - i0);
                    const i64 nc0 = n * s.C;
                    const scalar_t* tile = grad_rows.rows(n, i0, rows);
                    for (i64 i = 0; i < rows; i++) {
                        const i64 offset = (n * s.HW + i0 + i) * s.C;
                        b_input_grad_row<scalar_t, A>(xp + offset, tile + i * s.C, dxp + offset, s.C, sb.data(),
                                                      p.data() + nc0, qa.data() + nc0, w.row(n), k.data() + nc0,
                                                      k0.data() + nc0);
                    }
                }
            });
        }
        if (mask[0] && weight.has_value()) dweight = param_grad(sums.get() + 4 * NC, *weight, s.N, s.C);
        if (mask[1] && bias.has_value()) dbias = param_grad(sums.get() + 3 * NC, *bias, s.N, s.C);
        if (mask[2] && variant == 0 && v1.has_value()) dv = param_grad(sums.get() + 1 * NC, *v1, s.N, s.C);
        if (mask[3] && !batch_from_x) {
            std::vector<double> dvar(s.C);
            for (i64 c = 0; c < s.C; c++) dvar[c] = dsb[c] / (2 * sbd[c]);
            dbatch_var = nc_tensor(dvar, {s.C}, batch_var_t.options());
        }
    });
    auto or_empty = [](const Tensor& t) { return t.defined() ? t : empty_vector(); };
    return {dx, or_empty(dweight), or_empty(dbias), or_empty(dv), or_empty(dbatch_var)};
}

// ============================== affine ==============================================
// y = x gamma + beta: an EvoNorm without its nonlinearity (the place of a BatchNorm with no activation after it). One
// pass each way: the forward reads x and writes y; the backward reads (grad, x) once, writing dx = g gamma while it
// sums g x and g per (n, c) for the parameters' gradients.

template <typename T, typename U, typename A>
void affine_plane(const T* __restrict x, U* __restrict y, i64 HW, A w, A b) {
    for (i64 j = 0; j < HW; j++) y[j] = static_cast<U>(static_cast<A>(x[j]) * w + b);
}

template <typename T, typename U, typename A>
void affine_row(const T* __restrict x, U* __restrict y, i64 C, const A* __restrict w, const A* __restrict b) {
    for (i64 c = 0; c < C; c++) y[c] = static_cast<U>(static_cast<A>(x[c]) * w[c] + b[c]);
}

Tensor affine_forward(const Tensor& x_in, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias) {
    const char* op = "evonorm::affine_forward";
    check_input(x_in, op);
    const Tensor x = dense(x_in);
    const Shape s = rows_shape_of(x);
    check_params(s, op, {{"weight", &weight}, {"bias", &bias}});
    Tensor y = empty_like_layout(x, x.scalar_type());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "evonorm_affine_forward", [&] {
        using A = typename AccOf<scalar_t>::type;
        const scalar_t* xp = x.const_data_ptr<scalar_t>();
        scalar_t* yp = y.data_ptr<scalar_t>();
        const PerNC<A> w(weight, s.C, A(1)), b(bias, s.C, A(0));
        if (!s.nhwc) {
            for_each_index(s.N * s.C, s.HW, [&](i64 nc) {
                const i64 n = nc / s.C, c = nc % s.C, offset = nc * s.HW;
                into_run<A>(yp + offset, s.HW, [&](auto* out) { affine_plane(xp + offset, out, s.HW, w(n, c), b(n, c)); });
            });
        } else {
            for_each_index(s.N * s.HW, s.C, [&](i64 row) {
                const i64 n = row / s.HW, offset = row * s.C;
                into_run<A>(yp + offset, s.C, [&](auto* out) { affine_row(xp + offset, out, s.C, w.row(n), b.row(n)); });
            });
        }
    });
    return y;
}

// dx = g w over one NCHW plane, and the plane's sums of g x and g: A within blocks of BLOCK values, double across.
template <typename T, typename U, typename A>
void affine_grad_plane(const T* __restrict x, const T* __restrict g, U* __restrict dx, i64 HW, A w, double& gx_sum,
                       double& g_sum) {
    gx_sum = g_sum = 0;
    for (i64 j0 = 0; j0 < HW; j0 += BLOCK) {
        const i64 j1 = std::min(j0 + BLOCK, HW);
        A gx = 0, gs = 0;
        for (i64 j = j0; j < j1; j++) {
            const A gj = static_cast<A>(g[j]);
            dx[j] = static_cast<U>(gj * w);
            gx += gj * static_cast<A>(x[j]);
            gs += gj;
        }
        gx_sum += gx;
        g_sum += gs;
    }
}

// dx = g w over one channels_last row of C channels, its g x and g added to the per-channel sums gx and gs.
template <typename T, typename U, typename A>
void affine_grad_row(const T* __restrict x, const T* __restrict g, U* __restrict dx, i64 C, const A* __restrict w,
                     A* __restrict gx, A* __restrict gs) {
    for (i64 c = 0; c < C; c++) {
        const A gc = static_cast<A>(g[c]);
        dx[c] = static_cast<U>(gc * w[c]);
        gx[c] += gc * static_cast<A>(x[c]);
        gs[c] += gc;
    }
}

std::tuple<Tensor, Tensor, Tensor> affine_backward(const Tensor& grad_in, const Tensor& x_in,
                                                   const std::optional<Tensor>& weight,
                                                   const std::optional<Tensor>& bias, std::array<bool, 2> mask) {
    const char* op = "evonorm::affine_backward";
    check_input(x_in, op);
    check_grad(grad_in, x_in, op);
    const Tensor x = dense(x_in);
    const Shape s = rows_shape_of(x);
    const Tensor g = grad_for(grad_in, x, s);
    check_params(s, op, {{"weight", &weight}, {"bias", &bias}});
    const i64 NC = s.N * s.C;
    Tensor dx = empty_like_layout(x, x.scalar_type()), dweight, dbias;
    const auto sums = uninitialized(2 * NC);  // per (n, c): sum g x, then sum g
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "evonorm_affine_backward", [&] {
        using A = typename AccOf<scalar_t>::type;
        const scalar_t *xp = x.const_data_ptr<scalar_t>(), *gp = g.const_data_ptr<scalar_t>();
        scalar_t* dxp = dx.data_ptr<scalar_t>();
        const PerNC<A> w(weight, s.C, A(1));
        if (!s.nhwc) {
            for_each_index(NC, 2 * s.HW, [&](i64 nc) {
                const i64 offset = nc * s.HW;
                into_run<A>(dxp + offset, s.HW, [&](auto* out) {
                    affine_grad_plane(xp + offset, gp + offset, out, s.HW, w(nc / s.C, nc % s.C), sums[nc], sums[NC + nc]);
                });
            });
            return;
        }
        at::parallel_for(0, s.N, grain(2 * s.HW * s.C), [&](i64 begin, i64 end) {
            std::vector<A> acc(2 * s.C);
            ChannelsLastRows<scalar_t> grad_rows(g, s);
            for (i64 n = begin; n < end; n++) {
                double *gx = sums.get() + n * s.C, *gs = sums.get() + NC + n * s.C;
                std::fill(gx, gx + s.C, 0.0);
                std::fill(gs, gs + s.C, 0.0);
                for (i64 i0 = 0; i0 < s.HW; i0 += BLOCK) {
                    std::fill(acc.begin(), acc.end(), A(0));
                    for (i64 t0 = i0; t0 < std::min(i0 + BLOCK, s.HW); t0 += TILE) {
                        const i64 rows = std::min(TILE, s.HW - t0);
                        const scalar_t* tile = grad_rows.rows(n, t0, rows);
                        for (i64 i = 0; i < rows; i++) {
                            const i64 offset = (n * s.HW + t0 + i) * s.C;
                            into_run<A>(dxp + offset, s.C, [&](auto* out) {
                                affine_grad_row(xp + offset, tile + i * s.C, out, s.C, w.row(n), acc.data(),
                                                acc.data() + s.C);
                            });
                        }
                    }
                    for (i64 c = 0; c < s.C; c++) gx[c] += acc[c], gs[c] += acc[s.C + c];
                }
            }
        });
    });
    if (mask[0] && weight.has_value()) dweight = param_grad(sums.get(), *weight, s.N, s.C);
    if (mask[1] && bias.has_value()) dbias = param_grad(sums.get() + NC, *bias, s.N, s.C);
    auto or_empty = [](const Tensor& t) { return t.defined() ? t : empty_vector(); };
    return {dx, or_empty(dweight), or_empty(dbias)};
}

}  // namespace

TORCH_LIBRARY_IMPL(evonorm, CPU, m) {
    m.impl("s_forward", &s_forward);
    m.impl("s_backward", &s_backward);
    m.impl("b_forward", &b_forward);
    m.impl("b_backward", &b_backward);
    m.impl("affine_forward", &affine_forward);
    m.impl("affine_backward", &affine_backward);
}

}  // namespace evonorm

// Importable as a Python module (setup.py builds evonorm_core.ops._C); importing it
// registers the kernels above.
#define EVONORM_CONCAT_(a, b) a##b
#define EVONORM_CONCAT(a, b) EVONORM_CONCAT_(a, b)
extern "C" PyMODINIT_FUNC EVONORM_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "EvoNorm CPU kernels", -1, nullptr};
    return PyModule_Create(&module);
}
