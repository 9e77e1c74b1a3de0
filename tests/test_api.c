/* The public header's small contracts: every enum's name and parse helpers are inverse
 * and keep the numbers stored in index profiles; unknown names and values are refused;
 * every options initialiser gives the all-zero defaults; the version function agrees
 * with the header; CHIMERA_BLAS_THREADS=keep is reported by the runtime info. */
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

static void test_enums(void)
{
    /* the numbers profiles store: never renumbered */
    CHECK(CHIMERA_IMPUTE_PROBE == 0 && CHIMERA_IMPUTE_ZERO == 1 && CHIMERA_IMPUTE_MIN == 2);
    CHECK(CHIMERA_PROBE_AUTO == 0 && CHIMERA_PROBE_BRUTE == 1 && CHIMERA_PROBE_GRAPH == 2);
    CHECK(CHIMERA_BACKEND_AUTO == 0 && CHIMERA_BACKEND_CPU == 1 && CHIMERA_BACKEND_CUDA == 2);
    for (int v = 0; v <= 2; v++) {
        chimera_impute i = CHIMERA_IMPUTE_MIN;
        chimera_probe p = CHIMERA_PROBE_GRAPH;
        chimera_backend b = CHIMERA_BACKEND_CUDA;
        CHECK_OK(chimera_impute_parse(chimera_impute_name((chimera_impute)v), &i), NULL);
        CHECK_OK(chimera_probe_parse(chimera_probe_name((chimera_probe)v), &p), NULL);
        CHECK_OK(chimera_backend_parse(chimera_backend_name((chimera_backend)v), &b), NULL);
        CHECK((int)i == v && (int)p == v && (int)b == v);
    }
    CHECK(strcmp(chimera_impute_name(CHIMERA_IMPUTE_ZERO), "zero") == 0);
    CHECK(strcmp(chimera_probe_name(CHIMERA_PROBE_BRUTE), "brute") == 0);
    CHECK(strcmp(chimera_backend_name(CHIMERA_BACKEND_CPU), "cpu") == 0);
    CHECK(chimera_impute_name((chimera_impute)3) == NULL);
    CHECK(chimera_probe_name((chimera_probe)-1) == NULL);
    CHECK(chimera_backend_name((chimera_backend)7) == NULL);
    chimera_probe p = CHIMERA_PROBE_GRAPH;
    CHECK_STATUS(chimera_probe_parse("Graph", &p), CHIMERA_ERR_INVALID_ARG, NULL);
    CHECK_STATUS(chimera_probe_parse(NULL, &p), CHIMERA_ERR_INVALID_ARG, NULL);
    CHECK_STATUS(chimera_probe_parse("graph", NULL), CHIMERA_ERR_INVALID_ARG, NULL);
    CHECK(p == CHIMERA_PROBE_GRAPH); /* untouched on failure */
}

static void test_defaults(void)
{
    chimera_corpus_opts co;
    chimera_exact_opts eo;
    chimera_build_opts bo;
    chimera_open_opts oo;
    chimera_search_opts so;
    chimera_synth_opts yo;
    memset(&co, 0xff, sizeof co);
    memset(&eo, 0xff, sizeof eo);
    memset(&bo, 0xff, sizeof bo);
    memset(&oo, 0xff, sizeof oo);
    memset(&so, 0xff, sizeof so);
    memset(&yo, 0xff, sizeof yo);
    chimera_corpus_opts_default(&co);
    chimera_exact_opts_default(&eo);
    chimera_build_opts_default(&bo);
    chimera_open_opts_default(&oo);
    chimera_search_opts_default(&so);
    chimera_synth_opts_default(&yo);
    CHECK(all_zero(&co, sizeof co) && all_zero(&eo, sizeof eo) && all_zero(&bo, sizeof bo));
    CHECK(all_zero(&oo, sizeof oo) && all_zero(&so, sizeof so) && all_zero(&yo, sizeof yo));

    /* search params: zero fields take the defaults for k, set fields stay */
    chimera_search_params p = {.k_fullbit = 77, .probe = CHIMERA_PROBE_GRAPH};
    chimera_search_params_default(10, &p);
    CHECK(p.n_probe > 0 && p.k_refine > 0 && p.chunks > 0);
    CHECK(p.k_fullbit == 77 && p.probe == CHIMERA_PROBE_GRAPH);
    CHECK(p.impute == CHIMERA_IMPUTE_PROBE);
}

static void test_version(void)
{
    CHECK(strcmp(chimera_version(), CHIMERA_VERSION_STRING) == 0);
    chimera_runtime_info ri;
    setenv("CHIMERA_BLAS_THREADS", "keep", 1);
    chimera_runtime_info_get(&ri);
    CHECK(ri.blas_threads_kept == 1);
    unsetenv("CHIMERA_BLAS_THREADS");
    chimera_runtime_info_get(&ri);
    CHECK(ri.blas_threads_kept == 0);
}

int main(void)
{
    test_enums();
    test_defaults();
    test_version();
    return check_report();
}
