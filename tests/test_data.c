/* Corpus and query loading: valid inputs load with the right offsets and ids (float32
 * and float16 alike); every kind of bad input — lengths that do not sum to the rows, an
 * empty document, a NaN or Inf token, duplicate or negative ids, a wrong-rank array,
 * 2-D queries without lengths, an empty or non-finite query — is refused with the
 * status the API documents and a message naming the file and the row, document or
 * query at fault. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "tmpdir.h"
#include "core/f16.h"
#include "core/npy.h"
#include "data/corpus.h"
#include "core/alloc.h"

enum { D = 8 };

static void write_corpus(const char *tok, const char *len, const float *t, int64_t n_tok,
                         const int64_t *lens, int64_t n_docs)
{
    chimera_error err;
    int64_t s1[2] = {n_tok, D}, s2[1] = {n_docs};
    CHECK_OK(cm_npy_write(tok, CM_F32, 2, s1, t, &err), &err);
    CHECK_OK(cm_npy_write(len, CM_I64, 1, s2, lens, &err), &err);
}

static void expect_fail(const char *tok, const char *len, const char *ids,
                        const chimera_corpus_opts *o, chimera_status want, const char *needle)
{
    data_corpus c;
    chimera_error err = {0};
    chimera_status s = data_corpus_open(&c, tok, len, ids, o, &err);
    CHECKF(s == want, "got %s (%s), want %s", chimera_status_str(s), err.msg,
           chimera_status_str(want));
    if (s == CHIMERA_OK) data_corpus_free(&c);
    else CHECKF(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
}

static void test_corpus(void)
{
    char tok[512], len[512], ids[512], tok16[512];
    test_path(tok, sizeof tok, "tokens.npy");
    test_path(len, sizeof len, "doclens.npy");
    test_path(ids, sizeof ids, "ids.txt");
    test_path(tok16, sizeof tok16, "tokens16.npy");
    float t[10 * D];
    uint16_t h[10 * D];
    for (int i = 0; i < 10 * D; i++) {
        t[i] = (float)((i * 7) % 13) / 13.0f;
        h[i] = cm_f32_to_f16(t[i]);
        t[i] = cm_f16_to_f32(h[i]); /* exactly representable in both */
    }
    int64_t lens[3] = {4, 5, 1};
    write_corpus(tok, len, t, 10, lens, 3);
    chimera_error err;
    int64_t s16[2] = {10, D};
    CHECK_OK(cm_npy_write(tok16, CM_F16, 2, s16, h, &err), &err);

    data_corpus c, c16;
    CHECK_OK(data_corpus_open(&c, tok, len, NULL, NULL, &err), &err);
    CHECK(c.n_docs == 3 && c.n_tokens == 10 && c.dim == D);
    CHECK(c.doc_off[0] == 0 && c.doc_off[1] == 4 && c.doc_off[2] == 9 && c.doc_off[3] == 10);
    CHECK(data_corpus_id(&c, 2) == 2);
    CHECK_OK(data_corpus_open(&c16, tok16, len, NULL, NULL, &err), &err);
    float scratch[10 * D];
    const float *a = data_corpus_rows(&c, 3, 5, scratch);
    float scratch2[10 * D];
    const float *b = data_corpus_rows(&c16, 3, 5, scratch2);
    CHECK(memcmp(a, b, 5 * D * sizeof(float)) == 0);
    data_corpus_free(&c16);
    data_corpus_free(&c);

    /* ids from text */
    test_write_file(ids, "17\n  5\n\n900\n", 12);
    CHECK_OK(data_corpus_open(&c, tok, len, ids, NULL, &err), &err);
    CHECK(data_corpus_id(&c, 0) == 17 && data_corpus_id(&c, 1) == 5 && data_corpus_id(&c, 2) == 900);
    data_corpus_free(&c);
    test_write_file(ids, "17\n5\n17\n", 8);
    expect_fail(tok, len, ids, NULL, CHIMERA_ERR_VALUE, "17 appears more than once");
    test_write_file(ids, "1\n2\n", 4);
    expect_fail(tok, len, ids, NULL, CHIMERA_ERR_DIM, "2 ids for 3 documents");
    test_write_file(ids, "1\nx2\n3\n", 7);
    expect_fail(tok, len, ids, NULL, CHIMERA_ERR_FORMAT, "ids.txt:2");
    test_write_file(ids, "1\n-2\n3\n", 7);
    expect_fail(tok, len, ids, NULL, CHIMERA_ERR_VALUE, "negative");
    {
        /* "2", 126 spaces, "3" on one line: read in 127-character pieces it used to
         * become the two ids 2 and 3 (three ids, as many as documents) */
        char longline[160];
        int n = snprintf(longline, sizeof longline, "1\n2%126s3\n", "");
        test_write_file(ids, longline, (size_t)n);
        expect_fail(tok, len, ids, NULL, CHIMERA_ERR_FORMAT, "ids.txt:2: line longer");
        /* a long last line without its newline is refused too; a short one is fine */
        n = snprintf(longline, sizeof longline, "1\n2\n3%130s", "");
        test_write_file(ids, longline, (size_t)n);
        expect_fail(tok, len, ids, NULL, CHIMERA_ERR_FORMAT, "ids.txt:3: line longer");
        test_write_file(ids, "1\n2\n3", 5);
        CHECK_OK(data_corpus_open(&c, tok, len, ids, NULL, &err), &err);
        CHECK(data_corpus_id(&c, 2) == 3);
        data_corpus_free(&c);
    }

    /* lengths */
    int64_t bad_sum[3] = {4, 5, 2};
    write_corpus(tok, len, t, 10, bad_sum, 3);
    expect_fail(tok, len, NULL, NULL, CHIMERA_ERR_DIM, "exceed the 10 token rows");
    int64_t short_sum[3] = {4, 4, 1};
    write_corpus(tok, len, t, 10, short_sum, 3);
    expect_fail(tok, len, NULL, NULL, CHIMERA_ERR_DIM, "sum to 9");
    int64_t empty[4] = {4, 0, 5, 1};
    write_corpus(tok, len, t, 10, empty, 4);
    expect_fail(tok, len, NULL, NULL, CHIMERA_ERR_EMPTY, "document 1 is empty");
    chimera_corpus_opts allow = {.allow_empty = 1};
    expect_fail(tok, len, NULL, &allow, CHIMERA_OK, "");
    int64_t neg[3] = {4, -5, 11};
    write_corpus(tok, len, t, 10, neg, 3);
    expect_fail(tok, len, NULL, NULL, CHIMERA_ERR_VALUE, "negative length");

    /* values */
    t[6 * D + 3] = NAN;
    write_corpus(tok, len, t, 10, lens, 3);
    expect_fail(tok, len, NULL, NULL, CHIMERA_ERR_VALUE, "row 6 (document 1), column 3");
    chimera_corpus_opts skip = {.skip_value_check = 1};
    expect_fail(tok, len, NULL, &skip, CHIMERA_OK, "");
    t[6 * D + 3] = INFINITY;
    write_corpus(tok, len, t, 10, lens, 3);
    expect_fail(tok, len, NULL, NULL, CHIMERA_ERR_VALUE, "row 6");
    h[9 * D] = 0x7c00;
    CHECK_OK(cm_npy_write(tok16, CM_F16, 2, s16, h, &err), &err);
    expect_fail(tok16, len, NULL, NULL, CHIMERA_ERR_VALUE, "row 9 (document 2)");

    /* shapes and types */
    int64_t s3[3] = {2, 5, D};
    CHECK_OK(cm_npy_write(tok, CM_F32, 3, s3, t, &err), &err);
    expect_fail(tok, len, NULL, NULL, CHIMERA_ERR_DIM, "2-D");
    int32_t ints[10 * D] = {0};
    CHECK_OK(cm_npy_write(tok, CM_I32, 2, s16, ints, &err), &err);
    expect_fail(tok, len, NULL, NULL, CHIMERA_ERR_UNSUPPORTED, "float32 or float16");
    write_corpus(tok, len, t, 10, lens, 3);
    expect_fail(tok, "/nonexistent/doclens.npy", NULL, NULL, CHIMERA_ERR_IO, "doclens.npy");
}

static void test_queries(void)
{
    char qp[512], lp[512];
    test_path(qp, sizeof qp, "queries.npy");
    test_path(lp, sizeof lp, "qlens.npy");
    float q[12 * D];
    for (int i = 0; i < 12 * D; i++) q[i] = (float)i / (12 * D);
    chimera_error err;
    data_queries dq;
    int64_t s3[3] = {3, 4, D};
    CHECK_OK(cm_npy_write(qp, CM_F32, 3, s3, q, &err), &err);
    CHECK_OK(data_queries_open(&dq, qp, NULL, &err), &err);
    CHECK(dq.n == 3 && dq.dim == D && dq.off[3] == 12 && dq.tokens[5] == q[5]);
    data_queries_free(&dq);
    CHECK_STATUS(data_queries_open(&dq, qp, lp, &err), CHIMERA_ERR_DIM, &err);

    int64_t s2[2] = {12, D}, lens[3] = {2, 7, 3}, s1[1] = {3};
    CHECK_OK(cm_npy_write(qp, CM_F32, 2, s2, q, &err), &err);
    CHECK_STATUS(data_queries_open(&dq, qp, NULL, &err), CHIMERA_ERR_DIM, &err);
    CHECK(strstr(err.msg, "--qlens") != NULL);
    CHECK_OK(cm_npy_write(lp, CM_I64, 1, s1, lens, &err), &err);
    CHECK_OK(data_queries_open(&dq, qp, lp, &err), &err);
    CHECK(dq.n == 3 && dq.off[1] == 2 && dq.off[2] == 9 && dq.off[3] == 12);
    data_queries_free(&dq);
    int64_t bad[3] = {2, 7, 4};
    CHECK_OK(cm_npy_write(lp, CM_I64, 1, s1, bad, &err), &err);
    CHECK_STATUS(data_queries_open(&dq, qp, lp, &err), CHIMERA_ERR_DIM, &err);
    int64_t with_empty[3] = {5, 0, 7};
    CHECK_OK(cm_npy_write(lp, CM_I64, 1, s1, with_empty, &err), &err);
    CHECK_STATUS(data_queries_open(&dq, qp, lp, &err), CHIMERA_ERR_EMPTY, &err);
    CHECK(strstr(err.msg, "query 1 is empty") != NULL);
    q[10 * D + 2] = NAN;
    CHECK_OK(cm_npy_write(qp, CM_F32, 2, s2, q, &err), &err);
    CHECK_OK(cm_npy_write(lp, CM_I64, 1, s1, lens, &err), &err);
    CHECK_STATUS(data_queries_open(&dq, qp, lp, &err), CHIMERA_ERR_VALUE, &err);
    CHECK(strstr(err.msg, "query 2, token 1, column 2") != NULL);
    CHECK_STATUS(data_queries_new(&dq, q, 0, D, NULL, 4, &err), CHIMERA_ERR_INVALID_ARG, &err);
}

static void test_alloc_failures(void)
{
    /* Every allocation of an open, failed in turn, gives NOMEM and leaks nothing (the
     * sanitizer build checks the leaks). */
    char tok[512], len[512];
    test_path(tok, sizeof tok, "tokens.npy");
    test_path(len, sizeof len, "doclens.npy");
    float t[10 * D] = {0};
    int64_t lens[3] = {4, 5, 1};
    write_corpus(tok, len, t, 10, lens, 3);
    int ok_seen = 0, all_nomem = 1;
    for (int n = 0; n < 20 && !ok_seen; n++) {
        data_corpus c;
        chimera_error err;
        cm_alloc_fail_after(n);
        chimera_status s = data_corpus_open(&c, tok, len, NULL, NULL, &err);
        cm_alloc_fail_after(-1);
        if (s == CHIMERA_OK) {
            ok_seen = 1;
            data_corpus_free(&c);
        } else {
            all_nomem &= s == CHIMERA_ERR_NOMEM;
        }
    }
    CHECK(ok_seen);
    CHECK(all_nomem);
}

int main(void)
{
    test_corpus();
    test_queries();
    test_alloc_failures();
    return check_report();
}
