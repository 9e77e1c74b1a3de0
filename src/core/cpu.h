/* CPU features and the SIMD level, decided once per process.
 *
 * Detection checks CPUID *and* XCR0 (the OS must save the wider registers), which is
 * the gap ggml's FIXME admits. CHIMERA_SIMD=scalar|avx2|avx512 in the environment caps
 * the level (it can lower it, never raise it above what the CPU supports). Kernels
 * register one function per level and pick through cm_simd_level() at setup time, not
 * per call. */
#ifndef CHIMERA_CORE_CPU_H
#define CHIMERA_CORE_CPU_H

typedef enum cm_simd_level {
    CM_SIMD_SCALAR = 0,
    CM_SIMD_AVX2 = 1,   /* AVX2 + FMA + BMI2 + POPCNT + F16C */
    CM_SIMD_AVX512 = 2, /* AVX-512 F/BW/VL/DQ + VPOPCNTDQ (+ VNNI when present) */
} cm_simd_level;

/* The level in use: the best the CPU supports, capped by CHIMERA_SIMD. */
cm_simd_level cm_simd_level_get(void);

/* Whether this CPU can run code of `level` (ignores CHIMERA_SIMD): tests use it to run
 * every variant the machine supports against the scalar reference. */
int cm_cpu_supports(cm_simd_level level);

/* AVX-512 BF16 (vdpbf16ps: bfloat16 pair dot products into float32 lanes, twice the
 * multiply-adds of an FMA per instruction), which not every AVX-512 CPU has: whether
 * this CPU has it (with the AVX512 level), and whether kernels use it (the level in use
 * is AVX512: CHIMERA_SIMD=avx2 turns it off too). */
int cm_cpu_supports_bf16_dot(void);
int cm_bf16_dot_in_use(void);

/* "scalar", "avx2" or "avx512". */
const char *cm_simd_level_name(cm_simd_level level);

/* Number of online CPUs (>= 1). */
int cm_cpu_count(void);

#endif
