// Qwen3-0.6B's 28 layers of GEMVs at batch 1 as one persistent kernel that streams every weight tile through a
// ring of NS shared-memory slots with Hopper's bulk copy (cp.async.bulk, completion on an mbarrier), read by
// scripts/stream_layers.py. The same computation as scripts/persistent_layers.py: per layer
//   qkv = Wqkv . rmsnorm(h) n1;  h += Wo . qkv[:QO];  a = silu(Wg . xn) * (Wu . xn), xn = rmsnorm(h) n2;  h += Wd . a
// (attention replaced by passing q through). One block per SM; a grid barrier (a counter per stage) separates the
// stages. The copies do not depend on the activations, so the ring runs up to NS tiles ahead of the arithmetic,
// across the barriers: HBM keeps streaming while the blocks wait (Hazy Research's "No Bubbles" megakernel does
// likewise). Call 90's persistent Triton kernel held the next stage's weights in registers and lost; this holds
// them in shared memory. No system headers: bf16 is unpacked by shifting, so NVRTC and nvcc both build it as is.
// ATTN (the full layer): attention between the qkv and o stages (stream_attention.cuh), a barrier on either side.

constexpr int H = 1024, QKV = 4096, QO = 2048, INTER = 3072;
constexpr int MAX_WARPS = 16;          // part and red are sized for up to 16 warps a block
constexpr int SLOT = 16384;            // bytes of one tile's slot
constexpr unsigned POLLS = 1u << 22;   // a grid barrier's polls before it gives up (flag set): no hang

#include "stream_attention.cuh"

// Stage s of a layer: rows of a tile, K, tiles. 0 qkv [8 x 1024], 1 o [4 x 2048], 2 gate rows then up rows
// [4 + 4 x 1024], 3 down [2 x 3072] (12 KB).
__device__ __forceinline__ int tile_rows(int s) { return s == 1 ? 4 : (s == 3 ? 2 : 8); }
__device__ __forceinline__ int tiles_of(int s) { return s == 0 ? QKV / 8 : (s == 1 ? H / 4 : (s == 2 ? INTER / 4 : H / 2)); }

struct Tile {  // a position in a block's sequence of tiles: layer, stage, tile index
    int layer, stage, t;
    __device__ void next(int first, int step) {
        t += step;
        if (t >= tiles_of(stage)) {
            t = first;
            if (++stage == 4) { stage = 0; ++layer; }
        }
    }
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned mbar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(mbar) : "memory");
}

__device__ __forceinline__ bool mbar_done(unsigned mbar, unsigned parity) {
    unsigned ok;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok) : "r"(mbar), "r"(parity) : "memory");
    return ok;
}

struct Weights { const unsigned short *qkv, *o, *gu, *d; };  // bf16 bits: [L, QKV, H], [L, H, QO], [L, 2I, H], [L, H, I]

// Thread 0 only: the copies of tile ``w`` into ring slot ``slot``, completing on that slot's mbarrier.
__device__ void issue(const Weights& W, Tile w, unsigned char* slot, unsigned mbar) {
    const unsigned bytes = w.stage == 3 ? 2 * INTER * 2 : SLOT;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the slot's last reads before the copy's writes
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(mbar), "r"(bytes) : "memory");
    const unsigned dst = smem_addr(slot);
    const long long l = w.layer;
    if (w.stage == 0) {
        bulk_copy(dst, W.qkv + (l * QKV + w.t * 8) * H, bytes, mbar);
    } else if (w.stage == 1) {
        bulk_copy(dst, W.o + (l * H + w.t * 4) * QO, bytes, mbar);
    } else if (w.stage == 2) {
        bulk_copy(dst, W.gu + (l * 2 * INTER + w.t * 4) * H, SLOT / 2, mbar);
        bulk_copy(dst + SLOT / 2, W.gu + (l * 2 * INTER + INTER + w.t * 4) * H, SLOT / 2, mbar);
    } else {
        bulk_copy(dst, W.d + (l * H + w.t * 2) * INTER, bytes, mbar);
    }
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float dot8(uint4 w, const float* x) {  // 8 bf16 weights . 8 floats
    const float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
    return __uint_as_float(w.x << 16) * a.x + __uint_as_float(w.x & 0xffff0000u) * a.y
         + __uint_as_float(w.y << 16) * a.z + __uint_as_float(w.y & 0xffff0000u) * a.w
         + __uint_as_float(w.z << 16) * b.x + __uint_as_float(w.z & 0xffff0000u) * b.y
         + __uint_as_float(w.w << 16) * b.z + __uint_as_float(w.w & 0xffff0000u) * b.w;
}

// Each warp's share of tile [R, K] . xs: warp w takes row w % R and the (w / R)-th of WARPS / R segments of K.
template <int R, int K, int WARPS>
__device__ __forceinline__ void tile_dot(const unsigned char* tile, const float* xs, float* part) {
    constexpr int SEG = K * R / WARPS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = warp % R, seg = warp / R;
    const uint4* w = reinterpret_cast<const uint4*>(tile) + (row * K + seg * SEG) / 8;
    const float* x = xs + seg * SEG;
    float acc = 0.f;
#pragma unroll
    for (int v = lane; v < SEG / 8; v += 32) acc += dot8(w[v], x + 8 * v);
    acc = warp_sum(acc);
    if (lane == 0) part[warp] = acc;
}

// xs[0:n] = src (read past L1: other blocks wrote it), RMS-normalised and scaled by ``norm`` when given.
template <int WARPS>
__device__ void load_x(float* xs, const float* src, int n, const unsigned short* norm, float eps, float* red) {
    float ss = 0.f;
    for (int i = 4 * threadIdx.x; i < n; i += 4 * 32 * WARPS) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(src + i));
        *reinterpret_cast<float4*>(xs + i) = v;
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    if (norm == nullptr) { __syncthreads(); return; }
    ss = warp_sum(ss);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = ss;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += red[w];
    const float rstd = rsqrtf(total / n + eps);
    for (int i = threadIdx.x; i < n; i += 32 * WARPS) xs[i] *= rstd * __uint_as_float(unsigned(norm[i]) << 16);
    __syncthreads();
}

__device__ __forceinline__ void grid_signal(unsigned* ctr) {
    __syncthreads();  // every thread's stores of this stage before thread 0 publishes them
    if (threadIdx.x == 0) { __threadfence(); atomicAdd(ctr, 1u); }
}

__device__ __forceinline__ void grid_wait(const unsigned* ctr, unsigned target, int* flag) {
    if (threadIdx.x == 0) {
        unsigned seen, n = 0;
        if (*reinterpret_cast<volatile int*>(flag) == 0) {
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(ctr) : "memory");
                if ((++n & 1023u) == 0 && *reinterpret_cast<volatile int*>(flag)) break;
            } while (seen < target && n < POLLS);
            if (seen < target) atomicExch(flag, 1);  // not every block resident, or one failed: give up, say so
        }
        __threadfence();
    }
    __syncthreads();
}

// Row r's sum over the warps that took its segments (warp w holds row w % R's segment w / R).
template <int R, int WARPS>
__device__ __forceinline__ float row_sum(const float* part, int r) {
    float s = 0.f;
#pragma unroll
    for (int w = r; w < WARPS; w += R) s += part[w];
    return s;
}

// A tile's outputs, by threads 0..R-1, from ``part``.
template <int WARPS>
__device__ void epilogue(Tile c, const float* part, float* h, float* qkv, float* act) {
    const int r = threadIdx.x;
    if (c.stage == 0 && r < 8) {
        qkv[c.t * 8 + r] = row_sum<8, WARPS>(part, r);
    } else if (c.stage == 1 && r < 4) {
        float* y = h + c.t * 4 + r;
        *y = __ldcg(y) + row_sum<4, WARPS>(part, r);
    } else if (c.stage == 2 && r < 4) {
        const float g = row_sum<8, WARPS>(part, r), u = row_sum<8, WARPS>(part, r + 4);
        act[c.t * 4 + r] = g / (1.f + __expf(-g)) * u;
    } else if (c.stage == 3 && r < 2) {
        float* y = h + c.t * 2 + r;
        *y = __ldcg(y) + row_sum<2, WARPS>(part, r);
    }
}

template <int NS, bool BARRIER, int WARPS, bool ATTN>
__device__ __forceinline__ void stream_layers(Weights W, const unsigned short* n1, const unsigned short* n2, float* h,
                                              float* qkv, float* act, unsigned* ctr, int* flag, int layers, float eps,
                                              Attn A) {
    static_assert(BARRIER || !ATTN, "attention reads every block's qkv rows: it needs the barriers");
    constexpr int NC = ATTN ? 5 : 4;  // grid counters a layer: after qkv, (attention,) o, gate/up, down
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* ring = smem;
    float* xs = reinterpret_cast<float*>(smem + NS * SLOT);          // [INTER] the stage's input
    float* part = xs + INTER;                                        // [2][MAX_WARPS], alternate tiles
    float* red = part + 2 * MAX_WARPS;                               // [MAX_WARPS]
    unsigned long long* mbar = reinterpret_cast<unsigned long long*>(red + MAX_WARPS);  // [NS]
    const int first = blockIdx.x, step = gridDim.x;
    if (threadIdx.x == 0) {
        for (int i = 0; i < NS; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(mbar + i)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    Tile p{0, 0, first};  // the next tile to copy: NS ahead of the arithmetic
    for (int i = 0; i < NS && p.layer < layers; ++i, p.next(first, step))
        if (threadIdx.x == 0) issue(W, p, ring + i * SLOT, smem_addr(mbar + i));
    unsigned phases = 0, n = 0;
    for (Tile c{0, 0, first}; c.layer < layers; ++c.stage) {
        if (c.stage == 4) { c.stage = 0; ++c.layer; if (c.layer == layers) break; }
        unsigned* done = ctr + NC * c.layer + c.stage + (ATTN && c.stage > 0);  // this stage's counter
        if (ATTN && c.stage == 1) {
            grid_wait(done - 2, step, flag);
            if (first < QH) attend<WARPS>(qkv, A, c.layer, first, eps, xs, red);
            grid_signal(done - 1);
        }
        if (BARRIER && (c.layer | c.stage)) grid_wait(done - 1, step, flag);
        const int k = c.stage == 1 ? QO : (c.stage == 3 ? INTER : H);
        const unsigned short* norm = c.stage == 0 ? n1 + c.layer * H : (c.stage == 2 ? n2 + c.layer * H : nullptr);
        load_x<WARPS>(xs, c.stage == 1 ? (ATTN ? A.out : qkv) : (c.stage == 3 ? act : h), k, norm, eps, red);
        for (c.t = first; NS > 0 && c.t < tiles_of(c.stage); c.t += step, ++n) {  // NS = 0: no weights at all
            const int s = n % (NS > 0 ? NS : 1);
            while (!mbar_done(smem_addr(mbar + s), (phases >> s) & 1u)) {}
            phases ^= 1u << s;
            float* pt = part + (n & 1) * MAX_WARPS;
            const unsigned char* tile = ring + s * SLOT;
            if (c.stage == 0 || c.stage == 2) tile_dot<8, H, WARPS>(tile, xs, pt);
            else if (c.stage == 1) tile_dot<4, QO, WARPS>(tile, xs, pt);
            else tile_dot<2, INTER, WARPS>(tile, xs, pt);
            __syncthreads();  // the slot is read and the sums are in: refill the slot, then the outputs
            if (p.layer < layers) {
                if (threadIdx.x == 0) issue(W, p, ring + s * SLOT, smem_addr(mbar + s));
                p.next(first, step);
            }
            epilogue<WARPS>(c, pt, h, qkv, act);
        }
        if (BARRIER) grid_signal(done);
        else __syncthreads();
    }
}

#define STREAM_KERNEL(NAME, NS, BARRIER, WARPS, ATTN)                                                               \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, 1)                                                      \
    NAME(const unsigned short* wqkv, const unsigned short* wo, const unsigned short* wgu, const unsigned short* wd,  \
         const unsigned short* n1, const unsigned short* n2, float* h, float* qkv, float* act, unsigned* ctr,        \
         int* flag, int layers, float eps, const unsigned short* qn, const unsigned short* kn, unsigned short* kc,   \
         unsigned short* vc, const float* cos_sin, float* attn, int pos, int max_ctx) {                              \
        stream_layers<NS, BARRIER, WARPS, ATTN>(Weights{wqkv, wo, wgu, wd}, n1, n2, h, qkv, act, ctr, flag, layers,  \
                                                eps, Attn{qn, kn, kc, vc, cos_sin, attn, pos, max_ctx});             \
    }

// the GEMVs alone, attention replaced by passing q through to o_proj (persistent_layers.py's computation)
STREAM_KERNEL(stream_ns4, 4, true, 8, false)
STREAM_KERNEL(stream_ns8, 8, true, 8, false)
STREAM_KERNEL(stream_ns13, 13, true, 8, false)
STREAM_KERNEL(stream_ns13_w16, 13, true, 16, false)         // 512 threads: the arithmetic of a tile in half the time
STREAM_KERNEL(stream_ns13_nobarrier, 13, false, 8, false)  // wrong values: the bound with the barriers taken out
STREAM_KERNEL(stream_barriers_only, 0, true, 8, false)     // wrong values: the barriers and reloads without weights
// the full layer: Qwen3's attention at batch 1 between qkv and o
STREAM_KERNEL(layer_ns13, 13, true, 8, true)
STREAM_KERNEL(layer_ns13_w16, 13, true, 16, true)
