// The 1-bit inner product <b - 1/2, q'> by centred float LUT (quant_math.h layout) on
// the device, for refine.cu and docscore.cu. A code of dim_pad bits is n_words =
// dim_pad/32 little-endian uint32 words; group g (dims 4g..4g+3) is nibble g % 8 of word
// g / 8, which is exactly qm_lut_ip's byte g/2, nibble g%2. The groups are summed in
// ascending order, as qm_lut_ip does, so a device sum equals the host's bit for bit
// (same LUT floats, same additions).
//
// NW > 0: the code is loaded into registers with NW/2 independent 8-byte loads before
// any use (rows are dim_pad/8 bytes, a multiple of 8, so the loads are aligned) and the
// loops unroll with constant register indices. NW == 0 is the generic path for other
// dimensions (reads words as it goes).
#ifndef CHIMERA_BACKEND_CUDA_LUT_CUH
#define CHIMERA_BACKEND_CUDA_LUT_CUH

#include <cstdint>

template <int NW> struct cu_code {
    uint32_t w[NW > 0 ? NW : 1];
};

template <int NW>
__device__ static inline void cu_code_load(cu_code<NW> &c, const uint8_t *code)
{
    if constexpr (NW > 0) {
        const uint2 *p = reinterpret_cast<const uint2 *>(code);
#pragma unroll
        for (int i = 0; i < NW / 2; i++) {
            uint2 v = __ldg(p + i);
            c.w[2 * i] = v.x;
            c.w[2 * i + 1] = v.y;
        }
    } else {
        (void)c;
        (void)code;
    }
}

template <int NW>
__device__ static inline float cu_lut_ip(const float *lut, const cu_code<NW> &c,
                                         const uint8_t *code, uint32_t n_words)
{
    float acc = 0.0f;
    if constexpr (NW > 0) {
        (void)code;
        (void)n_words;
#pragma unroll
        for (int i = 0; i < NW; i++) {
            uint32_t x = c.w[i];
#pragma unroll
            for (int k = 0; k < 8; k++) acc += lut[16 * (8 * i + k) + ((x >> (4 * k)) & 15u)];
        }
    } else {
        (void)c;
        const uint32_t *p = reinterpret_cast<const uint32_t *>(code);
        for (uint32_t i = 0; i < n_words; i++) {
            uint32_t x = __ldg(p + i);
#pragma unroll
            for (int k = 0; k < 8; k++) acc += lut[16 * (8 * i + k) + ((x >> (4 * k)) & 15u)];
        }
    }
    return acc;
}

// Calls f.template operator()<NW>() with the NW for n_words (0: generic).
#define CU_DISPATCH_NW(n_words, CALL)                                                          \
    switch (n_words) {                                                                         \
    case 2: CALL(2); break;                                                                    \
    case 4: CALL(4); break;                                                                    \
    case 6: CALL(6); break;                                                                    \
    case 8: CALL(8); break;                                                                    \
    case 12: CALL(12); break;                                                                  \
    case 16: CALL(16); break;                                                                  \
    default: CALL(0); break;                                                                   \
    }

#endif
