// The attention stage of stream_layers.cu's full-layer variant (ATTN): Qwen3's q/k RMSNorm per head, RoPE
// ("rotate half", as transformers' Qwen3), the new K/V stored into the layer's cache at ``pos``, and one query
// against positions [0, pos] of its KV head, for one query head per block. Batch 1, a contiguous cache per layer
// and KV head ([L, KVH, max_ctx, D] bf16 bits): the paging of the engine's cache is left out of this probe.

constexpr int D = 128, QH = 16, KVH = 8;  // Qwen3-0.6B: head_dim, query heads, KV heads (2 query heads a KV head)
constexpr float NONE = -3.0e38f;          // a running max before any position (exp(NONE - x) is 0)

struct Attn {
    const unsigned short *qn, *kn;  // [L, D] q_norm, k_norm weights
    unsigned short *kc, *vc;        // [L, KVH, max_ctx, D] the cache
    const float* cos_sin;           // [2 D] cos then sin at pos
    float* out;                     // [QH * D] the attention's output, o_proj's input
    int pos, max_ctx;
};

__device__ __forceinline__ unsigned short to_bf16(float f) {  // round to nearest even (no NaN here)
    const unsigned u = __float_as_uint(f);
    return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float4 bf16x4(uint2 w) {
    return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u),
                       __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xffff0000u));
}

// Rows q (head h) and k, v (its KV head) of ``qkv`` normalised and rotated into s[0:D] (q), s[D:2D] (k),
// s[2D:3D] (v); ``red`` [2] scratch. Every thread of the block calls it.
__device__ void qkv_rows(const float* qkv, const Attn& A, int layer, int h, float eps, float* s, float* red) {
    const int t = threadIdx.x, g = h / (QH / KVH);
    float q = 0.f, k = 0.f;
    if (t < D) {
        q = __ldcg(qkv + h * D + t);
        k = __ldcg(qkv + QH * D + g * D + t);
        s[2 * D + t] = __ldcg(qkv + (QH + KVH) * D + g * D + t);
    }
    if (t < 2 * 32) {  // warp 0 sums q's squares, warp 1 k's: lane i takes elements i, i + 32, ...
        const float* src = qkv + (t < 32 ? h * D : QH * D + g * D);
        float ss = 0.f;
        for (int i = t % 32; i < D; i += 32) { const float x = __ldcg(src + i); ss += x * x; }
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (t % 32 == 0) red[t / 32] = ss;
    }
    __syncthreads();
    if (t < D) {
        s[t] = q * rsqrtf(red[0] / D + eps) * __uint_as_float(unsigned(A.qn[layer * D + t]) << 16);
        s[D + t] = k * rsqrtf(red[1] / D + eps) * __uint_as_float(unsigned(A.kn[layer * D + t]) << 16);
    }
    __syncthreads();
    float qr = 0.f, kr = 0.f;
    if (t < D) {  // x' = x cos + rotate_half(x) sin, rotate_half(x) = (-x[D/2:], x[:D/2])
        const float c = A.cos_sin[t], sn = A.cos_sin[D + t], sign = t < D / 2 ? -1.f : 1.f;
        const int pair = t < D / 2 ? t + D / 2 : t - D / 2;
        qr = s[t] * c + sign * s[pair] * sn;
        kr = s[D + t] * c + sign * s[D + pair] * sn;
    }
    __syncthreads();
    if (t < D) { s[t] = qr; s[D + t] = kr; }
    __syncthreads();
}

// Block h: A.out[h D : (h + 1) D] = softmax(q K^T / sqrt(D)) V over positions [0, pos] of KV head h / 2, the
// new k, v (at pos) stored first by the even head of each pair. ``s``: 3 D + (2 + D) WARPS floats of scratch.
template <int WARPS>
__device__ void attend(const float* qkv, const Attn& A, int layer, int h, float eps, float* s, float* red) {
    qkv_rows(qkv, A, layer, h, eps, s, red);
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = h / (QH / KVH);
    const long long base = (static_cast<long long>(layer) * KVH + g) * A.max_ctx * D;
    if (h % (QH / KVH) == 0 && t < D) {
        A.kc[base + static_cast<long long>(A.pos) * D + t] = to_bf16(s[D + t]);
        A.vc[base + static_cast<long long>(A.pos) * D + t] = to_bf16(s[2 * D + t]);
    }
    const float4 q = *reinterpret_cast<const float4*>(s + 4 * lane);
    const float scale = rsqrtf(static_cast<float>(D));
    float m = NONE, l = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int j = warp; j <= A.pos; j += WARPS) {  // warp w: positions w, w + WARPS, ...; the new one from s
        const long long at = base + static_cast<long long>(j) * D + 4 * lane;
        const float4 k = j == A.pos ? *reinterpret_cast<const float4*>(s + D + 4 * lane)
                                    : bf16x4(*reinterpret_cast<const uint2*>(A.kc + at));
        const float4 v = j == A.pos ? *reinterpret_cast<const float4*>(s + 2 * D + 4 * lane)
                                    : bf16x4(*reinterpret_cast<const uint2*>(A.vc + at));
        float dot = q.x * k.x + q.y * k.y + q.z * k.z + q.w * k.w;
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        const float score = dot * scale, m_new = fmaxf(m, score), c = __expf(m - m_new), p = __expf(score - m_new);
        l = l * c + p;
        acc = make_float4(acc.x * c + p * v.x, acc.y * c + p * v.y, acc.z * c + p * v.z, acc.w * c + p * v.w);
        m = m_new;
    }
    float* ms = s + 3 * D;       // [WARPS] each warp's running max, then its sum of weights
    float* ls = ms + WARPS;
    float* accs = ls + WARPS;    // [WARPS, D]
    if (lane == 0) { ms[warp] = m; ls[warp] = l; }
    *reinterpret_cast<float4*>(accs + warp * D + 4 * lane) = acc;
    __syncthreads();
    if (t < D) {  // merge the warps' partial softmaxes (a warp with no position has m = NONE, weight 0)
        float mx = NONE, num = 0.f, den = 0.f;
        for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, ms[w]);
        for (int w = 0; w < WARPS; ++w) {
            const float e = ms[w] == NONE ? 0.f : __expf(ms[w] - mx);
            num += e * accs[w * D + t];
            den += e * ls[w];
        }
        A.out[h * D + t] = num / den;
    }
}
