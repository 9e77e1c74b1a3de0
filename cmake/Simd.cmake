# Per-file ISA flags. Only the *_avx2.c / *_avx512.c kernels are compiled for those ISAs;
# core/cpu.c checks CPUID and XCR0 once at run time and picks the level, so the library
# runs on any x86-64 (and CHIMERA_SIMD=scalar|avx2|avx512 forces one).
set(CHIMERA_AVX2_FLAGS -mavx2 -mfma -mbmi -mbmi2 -mpopcnt -mf16c)
set(CHIMERA_AVX512_FLAGS ${CHIMERA_AVX2_FLAGS} -mavx512f -mavx512bw -mavx512vl -mavx512dq
    -mavx512vpopcntdq -mavx512vnni)
# AVX512BF16 files hold kernels that run only where core/cpu.c finds AVX512_BF16 too.
set(CHIMERA_AVX512BF16_FLAGS ${CHIMERA_AVX512_FLAGS} -mavx512bf16)
function(chimera_simd_flags level)
  foreach(f ${ARGN})
    set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${CHIMERA_${level}_FLAGS}")
  endforeach()
endfunction()
