/* Device-side decoding of GGUF's block types (core/quant.h has the layouts
 * byte by byte), shared by the quantized GEMVs (qgemv.cu) and the
 * dequantizing copies (qconvert.cu), which also take compressed-tensors'
 * types through qdeq (their decoding is quant_ct.cuh's). CUDA C++ only.
 *
 * Alignment: a block starts anywhere a row or a column slice on block
 * boundaries puts it, which for Q8_0 (34 bytes), Q5_0 (22), Q4_0 (18) and
 * Q6_K (210) is only an even address. So weights are read by 16-bit loads
 * (the launchers refuse an odd base address) and bytes, never wider.
 *
 * Exactness: qdeq computes an element with the f32 operations of
 * core/quant.c in the same order, each rounded on its own (__fmul_rn and
 * friends: no FMA contraction, which the C side is compiled without), so a
 * dequantized element equals the CPU's bit for bit.
 */
#ifndef SHARDSWAP_BACKEND_CUDA_QUANT_CUH
#define SHARDSWAP_BACKEND_CUDA_QUANT_CUH

#include "cuda_common.cuh"
#include "quant_ct.cuh"

/* Elements and bytes per block of each enum cuda_qtype. */
template <int QT> struct qtraits;
template <> struct qtraits<CUDA_Q8_0> {
    static constexpr int QK = 32, BYTES = 34;
};
template <> struct qtraits<CUDA_Q4_0> {
    static constexpr int QK = 32, BYTES = 18;
};
template <> struct qtraits<CUDA_Q5_0> {
    static constexpr int QK = 32, BYTES = 22;
};
template <> struct qtraits<CUDA_Q5_1> {
    static constexpr int QK = 32, BYTES = 24;
};
template <> struct qtraits<CUDA_Q4_K> {
    static constexpr int QK = 256, BYTES = 144;
};
template <> struct qtraits<CUDA_Q5_K> {
    static constexpr int QK = 256, BYTES = 176;
};
template <> struct qtraits<CUDA_Q6_K> {
    static constexpr int QK = 256, BYTES = 210;
};
template <> struct qtraits<CUDA_CT_I8> {
    static constexpr int QK = 32, BYTES = 37;
};
template <> struct qtraits<CUDA_CT_I4> {
    static constexpr int QK = 32, BYTES = 21;
};
template <> struct qtraits<CUDA_CT_F8> {
    static constexpr int QK = 32, BYTES = 36;
};

/* A little-endian u16 at an even address; a u32 of two of them. */
__device__ __forceinline__ uint32_t q_u16(const uint8_t *p)
{
    return *(const uint16_t *)p;
}

__device__ __forceinline__ uint32_t q_u32(const uint8_t *p)
{
    return q_u16(p) | q_u16(p + 2) << 16;
}

__device__ __forceinline__ float q_f16(const uint8_t *p)
{
    return cuda_f16_bits_to_f32((uint16_t)q_u16(p));
}

/* core/quant.h's quant_scale_min: the 6-bit scale and min j (< 8) of a
 * Q4_K/Q5_K block's 12 bytes q. */
__device__ __forceinline__ void q_scale_min(int j, const uint8_t *q, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element j (< QK) of the block at b, dequantized as core/quant.c (or
 * core/quant_ct.c) does. */
template <int QT> __device__ __forceinline__ float qdeq(const uint8_t *b, int j)
{
    if constexpr (QT >= CUDA_CT_I8) {
        return ct_deq<QT>(b, j);
    } else if constexpr (QT == CUDA_Q8_0) {
        return __fmul_rn(q_f16(b), (float)(int8_t)b[2 + j]);
    } else if constexpr (QT == CUDA_Q4_0) {
        const int byte = b[2 + (j & 15)];
        const int q = j < 16 ? byte & 15 : byte >> 4;
        return __fmul_rn(q_f16(b), (float)(q - 8));
    } else if constexpr (QT == CUDA_Q5_0 || QT == CUDA_Q5_1) {
        /* Q5_0: d, qh at 2, qs at 6; Q5_1: d, m, qh at 4, qs at 8 */
        constexpr int QH = QT == CUDA_Q5_0 ? 2 : 4;
        const uint32_t qh = q_u32(b + QH);
        const int byte = b[QH + 4 + (j & 15)];
        const int q = (j < 16 ? byte & 15 : byte >> 4) | (int)((qh >> j) & 1) << 4;
        if constexpr (QT == CUDA_Q5_0)
            return __fmul_rn(q_f16(b), (float)(q - 16));
        else
            return __fadd_rn(__fmul_rn(q_f16(b), (float)q), q_f16(b + 2));
    } else if constexpr (QT == CUDA_Q4_K || QT == CUDA_Q5_K) {
        /* sub-block s of 32: nibble s & 1 of qs[32 (s / 2) + l], and for
         * Q5_K bit s of qh[l] as the fifth bit */
        constexpr int QS = QT == CUDA_Q4_K ? 16 : 48;
        const int s = j / 32, l = j % 32;
        const int byte = b[QS + 32 * (s / 2) + l];
        int q = s & 1 ? byte >> 4 : byte & 15;
        if constexpr (QT == CUDA_Q5_K)
            q |= ((b[16 + l] >> s) & 1) << 4;
        int sc, mn;
        q_scale_min(s, b + 4, &sc, &mn);
        const float d0 = __fmul_rn(q_f16(b), (float)sc), m0 = __fmul_rn(q_f16(b + 2), (float)mn);
        return __fsub_rn(__fmul_rn(d0, (float)q), m0);
    } else {
        static_assert(QT == CUDA_Q6_K, "a block type");
        /* half h of 128, quarter k of 32, line l: ql 0, qh 128, scales 192, d 208 */
        const int h = j / 128, k = (j % 128) / 32, l = j % 32;
        const int lo = b[64 * h + l + 32 * (k & 1)];
        const int q =
            ((k >> 1 ? lo >> 4 : lo & 15) | ((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4) - 32;
        const int sc = (int8_t)b[192 + 8 * h + l / 16 + 2 * k];
        return __fmul_rn(__fmul_rn(q_f16(b + 208), (float)sc), (float)q);
    }
}

/* Element c of a quantized row at row (whole blocks from c = 0). */
template <int QT> __device__ __forceinline__ float qdeq_row(const uint8_t *row, int c)
{
    using T = qtraits<QT>;
    return qdeq<QT>(row + (size_t)(c / T::QK) * T::BYTES, c % T::QK);
}

/* ---- the integer dot products of qgemv.cu ---- */

/* One lane's share of a weight block: 8 quants packed as bytes in w0, w1
 * (signed for Q8_0, else unsigned and below 64), the offsets of the 8
 * matching quants of x within x's block (xo0, xo1: 4 each), and how its
 * integer sums enter the block's: isum += sc * (w . x - off * sum x),
 * msum += mn * sum x. */
struct qlane {
    uint32_t w0, w1;
    int xo0, xo1;
    int sc, mn, off;
};

/* The fifth bits of 4 elements (bits 0..3 of b) at bit 4 of each byte. */
__device__ __forceinline__ uint32_t q_spread4(uint32_t b)
{
    return (b & 1u) << 4 | (b & 2u) << 11 | (b & 4u) << 18 | (b & 8u) << 25;
}

/* The share of lane t (< 4) of a 32-element block, or of lane t (< 32) of
 * a 256-element block, at blk. */
template <int QT> __device__ __forceinline__ qlane q_lane(const uint8_t *blk, int t)
{
    qlane L = {0, 0, 0, 0, 1, 0, 0};
    if constexpr (QT == CUDA_Q8_0) {
        L.w0 = q_u32(blk + 2 + 8 * t);
        L.w1 = q_u32(blk + 6 + 8 * t);
        L.xo0 = 8 * t;
        L.xo1 = 8 * t + 4;
    } else if constexpr (QT == CUDA_Q4_0 || QT == CUDA_Q5_0 || QT == CUDA_Q5_1) {
        /* bytes 4t .. 4t + 3 of qs: elements 4t.. (low nibbles) and
         * 16 + 4t.. (high nibbles) */
        constexpr int QS = QT == CUDA_Q4_0 ? 2 : QT == CUDA_Q5_0 ? 6 : 8;
        const uint32_t v = q_u32(blk + QS + 4 * t);
        L.w0 = v & 0x0F0F0F0Fu;
        L.w1 = (v >> 4) & 0x0F0F0F0Fu;
        if constexpr (QT != CUDA_Q4_0) {
            const uint32_t qh = q_u32(blk + QS - 4);
            L.w0 |= q_spread4((qh >> (4 * t)) & 0xFu);
            L.w1 |= q_spread4((qh >> (16 + 4 * t)) & 0xFu);
        }
        L.xo0 = 4 * t;
        L.xo1 = 16 + 4 * t;
        L.off = QT == CUDA_Q4_0 ? 8 : QT == CUDA_Q5_0 ? 16 : 0;
        L.mn = QT == CUDA_Q5_1 ? 1 : 0; /* Q5_1: msum is the sum of x */
    } else if constexpr (QT == CUDA_Q4_K || QT == CUDA_Q5_K) {
        /* sub-block s = t / 4 (nibble s & 1 of qs[32 (s / 2) + l]), lines
         * l0 .. l0 + 7 */
        constexpr int QS = QT == CUDA_Q4_K ? 16 : 48;
        const int s = t / 4, l0 = 8 * (t % 4), sh = 4 * (s & 1);
        L.w0 = (q_u32(blk + QS + 32 * (s / 2) + l0) >> sh) & 0x0F0F0F0Fu;
        L.w1 = (q_u32(blk + QS + 32 * (s / 2) + l0 + 4) >> sh) & 0x0F0F0F0Fu;
        if constexpr (QT == CUDA_Q5_K) {
            /* bit s of qh[l] for each of the 4 bytes */
            L.w0 |= ((q_u32(blk + 16 + l0) >> s) & 0x01010101u) << 4;
            L.w1 |= ((q_u32(blk + 20 + l0) >> s) & 0x01010101u) << 4;
        }
        q_scale_min(s, blk + 4, &L.sc, &L.mn);
        L.xo0 = 32 * s + l0;
        L.xo1 = 32 * s + l0 + 4;
    } else {
        static_assert(QT == CUDA_Q6_K, "a block type");
        /* sub-block s = t / 2 of 16: half h, quarter k, lines l0 .. l0 + 7 */
        const int s = t / 2, h = s / 8, k = (s % 8) / 2, l0 = 16 * (s % 2) + 8 * (t % 2);
        const uint8_t *ql = blk + 64 * h + 32 * (k & 1) + l0, *qh = blk + 128 + 32 * h + l0;
        const int sl = 4 * (k >> 1), shh = 2 * k;
        L.w0 = ((q_u32(ql) >> sl) & 0x0F0F0F0Fu) | ((q_u32(qh) >> shh) & 0x03030303u) << 4;
        L.w1 = ((q_u32(ql + 4) >> sl) & 0x0F0F0F0Fu) | ((q_u32(qh + 4) >> shh) & 0x03030303u) << 4;
        L.sc = (int8_t)blk[192 + s];
        L.off = 32;
        L.xo0 = 128 * h + 32 * k + l0;
        L.xo1 = L.xo0 + 4;
    }
    return L;
}

/* Block blk's scaled integer sums into partial p, as the CPU's acc_0 /
 * acc_k (backend/cpu/qdot.h), dx x's block scale. */
template <int QT>
__device__ __forceinline__ void q_apply(float &p, const uint8_t *blk, float dx, int isum, int msum)
{
    if constexpr (QT == CUDA_Q8_0 || QT == CUDA_Q4_0 || QT == CUDA_Q5_0) {
        p = fmaf(__fmul_rn(q_f16(blk), dx), (float)isum, p);
    } else if constexpr (QT == CUDA_Q5_1) {
        /* a K-quant with dmin = -m */
        p = fmaf(__fmul_rn(q_f16(blk), dx), (float)isum, p);
        p = fmaf(-__fmul_rn(-q_f16(blk + 2), dx), (float)msum, p);
    } else if constexpr (QT == CUDA_Q4_K || QT == CUDA_Q5_K) {
        p = fmaf(__fmul_rn(q_f16(blk), dx), (float)isum, p);
        p = fmaf(-__fmul_rn(q_f16(blk + 2), dx), (float)msum, p);
    } else {
        /* Q6_K: no min (the CPU's second fmaf adds a zero product to a
         * partial that is never -0: p as it was) */
        p = fmaf(__fmul_rn(q_f16(blk + 208), dx), (float)isum, p);
    }
}

/* The lane's integer sums of its share against x's block at xb. */
__device__ __forceinline__ void q_lane_dot(const qlane &L, const int8_t *xb, int *isum, int *msum)
{
    const int a0 = *(const int *)(xb + L.xo0), a1 = *(const int *)(xb + L.xo1);
    const int dot = __dp4a((int)L.w0, a0, __dp4a((int)L.w1, a1, 0));
    const int xs = __dp4a(0x01010101, a0, __dp4a(0x01010101, a1, 0));
    *isum = L.sc * (dot - L.off * xs);
    *msum = L.mn * xs;
}

/* Whether the launchers can read w of qtype q: every GGUF block at an even
 * address; compressed-tensors' blocks are read by bytes. */
static inline bool q_aligned(int q, const void *w, size_t row_bytes)
{
    return cuda_qtype_is_ct(q) || ((uintptr_t)w % 2 == 0 && row_bytes % 2 == 0);
}

/* return F<QT>(args...) for the enum cuda_qtype q, or
 * cudaErrorInvalidValue for another value. */
#define Q_DISPATCH(q, F, ...)                                                                      \
    switch (q) {                                                                                   \
    case CUDA_Q8_0:                                                                                \
        return F<CUDA_Q8_0>(__VA_ARGS__);                                                          \
    case CUDA_Q4_0:                                                                                \
        return F<CUDA_Q4_0>(__VA_ARGS__);                                                          \
    case CUDA_Q5_0:                                                                                \
        return F<CUDA_Q5_0>(__VA_ARGS__);                                                          \
    case CUDA_Q5_1:                                                                                \
        return F<CUDA_Q5_1>(__VA_ARGS__);                                                          \
    case CUDA_Q4_K:                                                                                \
        return F<CUDA_Q4_K>(__VA_ARGS__);                                                          \
    case CUDA_Q5_K:                                                                                \
        return F<CUDA_Q5_K>(__VA_ARGS__);                                                          \
    case CUDA_Q6_K:                                                                                \
        return F<CUDA_Q6_K>(__VA_ARGS__);                                                          \
    default:                                                                                       \
        return cudaErrorInvalidValue;                                                              \
    }

/* Q_DISPATCH over every block type, compressed-tensors' included (what
 * takes only qdeq: the dequantizing copies). */
#define Q_DISPATCH_ALL(q, F, ...)                                                                  \
    switch (q) {                                                                                   \
    case CUDA_CT_I8:                                                                               \
        return F<CUDA_CT_I8>(__VA_ARGS__);                                                         \
    case CUDA_CT_I4:                                                                               \
        return F<CUDA_CT_I4>(__VA_ARGS__);                                                         \
    case CUDA_CT_F8:                                                                               \
        return F<CUDA_CT_F8>(__VA_ARGS__);                                                         \
    default:                                                                                       \
        Q_DISPATCH(q, F, __VA_ARGS__)                                                              \
    }

#endif
