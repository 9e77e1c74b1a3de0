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
