# -Wall -Wextra everywhere, as errors unless CHIMERA_WERROR=OFF.
add_compile_options($<$<COMPILE_LANGUAGE:C>:-Wall> $<$<COMPILE_LANGUAGE:C>:-Wextra>
                    $<$<COMPILE_LANGUAGE:C>:-Wshadow> $<$<COMPILE_LANGUAGE:C>:-Wstrict-prototypes>
                    $<$<COMPILE_LANGUAGE:C>:-Wmissing-prototypes>)
if(CHIMERA_WERROR)
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-Werror>)
endif()
if(CHIMERA_NATIVE)
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-march=native>)
endif()
