/* CPUID/XCR0 feature detection (x86-64); other architectures report scalar. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long read_xcr0(void)
{
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static int bf16_hw; /* AVX512_BF16: CPUID leaf 7 subleaf 1, EAX bit 5 */

static cm_simd_level detect_hw(void)
{
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return CM_SIMD_SCALAR;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, popcnt = (c >> 23) & 1;
    int f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return CM_SIMD_SCALAR;
    unsigned long long xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return CM_SIMD_SCALAR; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return CM_SIMD_SCALAR;
    int avx2 = (b >> 5) & 1, bmi2 = (b >> 8) & 1, bmi1 = (b >> 3) & 1;
    if (!(avx2 && fma && popcnt && f16c && bmi1 && bmi2)) return CM_SIMD_SCALAR;
    int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1;
    int avx512vl = (b >> 31) & 1, vpopcntdq = (c >> 14) & 1, vnni = (c >> 11) & 1;
    int zmm_state = (xcr0 & 0xe6) == 0xe6; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (avx512f && avx512dq && avx512bw && avx512vl && vpopcntdq && vnni && zmm_state) {
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) bf16_hw = (a >> 5) & 1;
        return CM_SIMD_AVX512;
    }
    return CM_SIMD_AVX2;
}
#else
static int bf16_hw;
static cm_simd_level detect_hw(void) { return CM_SIMD_SCALAR; }
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cm_simd_level hw_level, used_level;

static void detect(void)
{
    hw_level = detect_hw();
    used_level = hw_level;
    const char *env = getenv("CHIMERA_SIMD");
    if (env) {
        cm_simd_level cap = hw_level;
        if (strcmp(env, "scalar") == 0) cap = CM_SIMD_SCALAR;
        else if (strcmp(env, "avx2") == 0) cap = CM_SIMD_AVX2;
        else if (strcmp(env, "avx512") == 0) cap = CM_SIMD_AVX512;
        if (cap < used_level) used_level = cap;
    }
}

cm_simd_level cm_simd_level_get(void)
{
    pthread_once(&once, detect);
    return used_level;
}

int cm_cpu_supports(cm_simd_level level)
{
    pthread_once(&once, detect);
    return level <= hw_level;
}

int cm_cpu_supports_bf16_dot(void)
{
    pthread_once(&once, detect);
    return bf16_hw;
}

int cm_bf16_dot_in_use(void)
{
    pthread_once(&once, detect);
    return bf16_hw && used_level >= CM_SIMD_AVX512;
}

const char *cm_simd_level_name(cm_simd_level level)
{
    switch (level) {
    case CM_SIMD_AVX512: return "avx512";
    case CM_SIMD_AVX2: return "avx2";
    default: return "scalar";
    }
}

int cm_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}
