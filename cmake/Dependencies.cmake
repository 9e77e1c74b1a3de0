# System libraries, all from Debian (scripts/install-deps.sh installs them):
#   OpenBLAS  sgemm for exact search, k-means assignment and kNN graphs
#   xxHash    section checksums of the on-disk index
#   cJSON     the index manifest and --json outputs
#   SQLite    document metadata and its filter predicates (src/meta/, the only user)
#   pthreads, libm
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED openblas)
pkg_check_modules(XXHASH REQUIRED libxxhash)
pkg_check_modules(CJSON REQUIRED libcjson)
pkg_check_modules(SQLITE3 REQUIRED sqlite3)
find_package(Threads REQUIRED)
set(CHIMERA_DEP_INCLUDES ${OPENBLAS_INCLUDE_DIRS} ${XXHASH_INCLUDE_DIRS} ${CJSON_INCLUDE_DIRS}
    ${SQLITE3_INCLUDE_DIRS})
find_library(CHIMERA_BLAS_LIB NAMES openblas HINTS ${OPENBLAS_LIBRARY_DIRS} REQUIRED)
find_library(CHIMERA_XXHASH_LIB NAMES xxhash HINTS ${XXHASH_LIBRARY_DIRS} REQUIRED)
find_library(CHIMERA_CJSON_LIB NAMES cjson HINTS ${CJSON_LIBRARY_DIRS} REQUIRED)
find_library(CHIMERA_SQLITE3_LIB NAMES sqlite3 HINTS ${SQLITE3_LIBRARY_DIRS} REQUIRED)
set(CHIMERA_DEP_LIBS ${CHIMERA_BLAS_LIB} ${CHIMERA_XXHASH_LIB} ${CHIMERA_CJSON_LIB} ${CHIMERA_SQLITE3_LIB}
    Threads::Threads m)
