# CHIMERA_SANITIZE=address,undefined (or thread): instrument every C file and link the
# runtime. UBSan does not recover, so a report fails the test that caused it.
if(CHIMERA_SANITIZE)
  string(REPLACE "," ";" _san "${CHIMERA_SANITIZE}")
  set(_flags "")
  foreach(s ${_san})
    if(NOT s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "CHIMERA_SANITIZE: unknown sanitizer '${s}'")
    endif()
    list(APPEND _flags -fsanitize=${s})
  endforeach()
  # float-cast-overflow traps a floating value converted to an integer type that cannot
  # hold it: how a hostile manifest number (1e300 as a count) would slip past a missing
  # range check. Neither clang nor gcc includes it in "undefined"; both support it.
  if("undefined" IN_LIST _san AND CMAKE_C_COMPILER_ID MATCHES "Clang|GNU")
    list(APPEND _flags -fsanitize=float-cast-overflow)
  endif()
  list(APPEND _flags -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:${_flags}>")
  add_link_options(${_flags})
endif()

# CHIMERA_FUZZ: libFuzzer targets (tests/fuzz_open.c). Every C file gets the coverage
# instrumentation libFuzzer steers by (-fsanitize=fuzzer-no-link); the fuzz executables
# add the libFuzzer runtime themselves. Without clang's runtime (Debian:
# libclang-rt-14-dev) the option turns itself off and only the standalone driver builds.
if(CHIMERA_FUZZ)
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=fuzzer)
  check_c_source_compiles("
    #include <stddef.h>
    #include <stdint.h>
    int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);
    int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }"
    CHIMERA_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  if(CHIMERA_HAVE_LIBFUZZER AND CMAKE_C_COMPILER_ID MATCHES "Clang")
    add_compile_options($<$<COMPILE_LANGUAGE:C>:-fsanitize=fuzzer-no-link>)
  else()
    message(WARNING "CHIMERA_FUZZ: libFuzzer unavailable (needs clang and its runtime); "
                    "building only the standalone fuzz driver")
    set(CHIMERA_FUZZ OFF CACHE BOOL "" FORCE)
  endif()
endif()
