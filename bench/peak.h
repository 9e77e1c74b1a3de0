/* The peak multiply-add rate of one instruction, as the benchmarks measure it: 12
 * independent chains of that instruction, so that the measured rate is its issue
 * throughput and not its latency. The core's peak against which bench_quant and
 * bench_rerank_kernel report what fraction their kernels reach.
 *
 * In a function of the instruction's target: PEAK_LOOP(vector type, initial value of
 * chain k, step(x) -> next x, fold(x) (consume a result, so the loop is kept),
 * multiply-adds per instruction); it returns GMAC/s of the thread's CPU time
 * (core/clock.h). */
#ifndef CHIMERA_BENCH_PEAK_H
#define CHIMERA_BENCH_PEAK_H

#include "core/clock.h"

#define PEAK_ITERS 20000000L
#define PEAK_CHAINS 12

#define PEAK_LOOP(VT, init, step, fold, macs)                                                  \
    VT a_[PEAK_CHAINS];                                                                        \
    for (int k = 0; k < PEAK_CHAINS; k++) a_[k] = init;                                        \
    double t0_ = cm_thread_cpu_now();                                                          \
    for (long i = 0; i < PEAK_ITERS; i++) {                                                    \
        _Pragma("GCC unroll 12") for (int k = 0; k < PEAK_CHAINS; k++) a_[k] = step(a_[k]);    \
    }                                                                                          \
    double t_ = cm_thread_cpu_now() - t0_;                                                     \
    for (int k = 0; k < PEAK_CHAINS; k++) fold(a_[k]);                                         \
    return (double)PEAK_ITERS * PEAK_CHAINS * (macs) / t_ / 1e9;

#endif
