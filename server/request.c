/* request.c — parsing the JSON bodies of search and document requests.
 *
 * A body is untrusted: every count is checked against the configured limits before
 * anything is allocated for it, every number is checked to be finite and in range, and
 * every failure becomes an error of the one shape (answer.c) with the status the issue
 * of the API fixes: 400 for a body that is not JSON or not the expected structure, 422
 * for a well-formed request the index cannot take (wrong dimension or dtype, a value
 * out of range, over a limit).
 *
 * Embeddings come in two forms, for queries and documents alike:
 *   nested arrays   [[[x, ...], ...], ...]: sets of vectors (queries, or documents),
 *                   each a list of dim numbers; sets may differ in length;
 *   base64          {"base64": "...", "dtype": "float32"|"float16", "shape": [n, m, d]}
 *                   (every set m vectors) or "shape": [total, d] with "lengths": [...]
 *                   (each set's count), little-endian, as numpy's tobytes() writes it.
 * JSON numbers cost ~10x the bytes of base64 and a parse per number; base64 is what the
 * Python client sends. cJSON parses nesting up to 1000 levels deep (its own limit), so
 * a deeply nested body is a 400, never a stack overflow. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"

/* ---- small helpers ------------------------------------------------------------------ */

/* A JSON number that is an integer in [lo, hi] (1e300, 2.5 and "7" are not). */
static int get_int(const cJSON *v, const char *what, int64_t lo, int64_t hi, int64_t *out,
                   srv_error *e)
{
    if (!cJSON_IsNumber(v))
        return srv_fail(e, 422, "INVALID_VALUE", "%s must be an integer", what);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
        return srv_fail(e, 422, "INVALID_VALUE", "%s must be an integer from %lld to %lld", what,
                        (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 0;
}

static uint16_t load_le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int sh = 0;
            while (!(man & 0x400)) {
                man <<= 1;
                sh++;
            }
            man &= 0x3ff;
            bits = sign | ((uint32_t)(127 - 15 - sh + 1) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62; /* standard and URL-safe alphabets */
    if (c == '/' || c == '_') return 63;
    return -1;
}

/* Decodes standard or URL-safe base64 (padding optional) into a new buffer. */
static int b64_decode(const char *s, size_t n, unsigned char **out, size_t *out_len, srv_error *e)
{
    while (n > 0 && s[n - 1] == '=') n--;
    if (n % 4 == 1) return srv_fail(e, 400, "INVALID_REQUEST", "base64: truncated input");
    unsigned char *o = malloc(n / 4 * 3 + 3);
    if (!o) return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory decoding base64");
    size_t j = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(o);
            return srv_fail(e, 400, "INVALID_REQUEST", "base64: invalid character at offset %zu", i);
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[j++] = (unsigned char)(acc >> bits);
        }
    }
    *out = o;
    *out_len = j;
    return 0;
}

/* ---- embeddings ----------------------------------------------------------------------- */

typedef struct vec_limits {
    const char *what;          /* "queries", "documents" */
    int64_t max_sets;
    int64_t max_per_set;
} vec_limits;

/* Parses sets of dim-vectors (nested arrays, or base64 with shape and lengths) into
 * tokens [total, dim] and lens [n]. lengths_item: the "lengths" member beside a base64
 * object (may be NULL). */
static int parse_vectors(const cJSON *v, const cJSON *lengths_item, uint32_t dim,
                         const vec_limits *lim, float **tokens_out, int64_t **lens_out,
                         int64_t *n_out, int64_t *total_out, srv_error *e)
{
    float *tokens = NULL;
    int64_t *lens = NULL, n = 0, total = 0;
    if (cJSON_IsArray(v)) {
        n = cJSON_GetArraySize(v);
        if (n == 0) return srv_fail(e, 422, "EMPTY", "%s: no vectors given", lim->what);
        if (n > lim->max_sets)
            return srv_fail(e, 422, "LIMIT_EXCEEDED", "%s: %lld sets, more than the limit of %lld",
                            lim->what, (long long)n, (long long)lim->max_sets);
        int64_t i = 0;
        const cJSON *set;
        cJSON_ArrayForEach(set, v) {
            if (!cJSON_IsArray(set))
                return srv_fail(e, 422, "INVALID_VALUE", "%s[%lld] must be an array of vectors",
                                lim->what, (long long)i);
            int64_t m = cJSON_GetArraySize(set);
            if (m == 0) return srv_fail(e, 422, "EMPTY", "%s[%lld] has no vectors", lim->what, (long long)i);
            if (m > lim->max_per_set)
                return srv_fail(e, 422, "LIMIT_EXCEEDED", "%s[%lld]: %lld vectors, more than the limit of %lld",
                                lim->what, (long long)i, (long long)m, (long long)lim->max_per_set);
            total += m;
            i++;
        }
        tokens = malloc((size_t)total * dim * sizeof *tokens);
        lens = malloc((size_t)n * sizeof *lens);
        if (!tokens || !lens) goto oom;
        int64_t t = 0;
        i = 0;
        cJSON_ArrayForEach(set, v) {
            lens[i] = cJSON_GetArraySize(set);
            int64_t r = 0;
            const cJSON *row;
            cJSON_ArrayForEach(row, set) {
                if (!cJSON_IsArray(row)) {
                    srv_fail(e, 422, "INVALID_VALUE", "%s[%lld][%lld] must be an array of %u numbers",
                             lim->what, (long long)i, (long long)r, dim);
                    goto fail;
                }
                int got = cJSON_GetArraySize(row);
                if (got != (int)dim) {
                    srv_fail(e, 422, "DIMENSION_MISMATCH",
                             "%s[%lld][%lld] has %d number%s; the index's dimension is %u",
                             lim->what, (long long)i, (long long)r, got, got == 1 ? "" : "s",
                             dim);
                    cJSON *d = cJSON_CreateObject();
                    cJSON_AddNumberToObject(d, "expected_dim", dim);
                    cJSON_AddNumberToObject(d, "got_dim", got);
                    srv_error_details(e, d);
                    goto fail;
                }
                float *dst = tokens + (size_t)t * dim;
                uint32_t c = 0;
                const cJSON *x;
                cJSON_ArrayForEach(x, row) {
                    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) ||
                        fabs(x->valuedouble) > 3.0e38) {
                        srv_fail(e, 422, "INVALID_VALUE", "%s[%lld][%lld][%u] is not a finite float32 number",
                                 lim->what, (long long)i, (long long)r, c);
                        goto fail;
                    }
                    dst[c++] = (float)x->valuedouble;
                }
                t++;
                r++;
            }
            i++;
        }
    } else if (cJSON_IsObject(v)) {
        const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(v, "base64");
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(v, "shape");
        const cJSON *lengths = cJSON_GetObjectItemCaseSensitive(v, "lengths");
        if (!lengths) lengths = lengths_item;
        if (!cJSON_IsString(b64) || !cJSON_IsArray(shape))
            return srv_fail(e, 400, "INVALID_REQUEST", "%s: an object needs \"base64\" (a string) and "
                            "\"shape\" (an array)", lim->what);
        size_t esz;
        const char *dts = cJSON_IsString(dt) ? dt->valuestring : dt ? "" : "float32";
        if (strcmp(dts, "float32") == 0 || strcmp(dts, "f4") == 0 || strcmp(dts, "<f4") == 0)
            esz = 4;
        else if (strcmp(dts, "float16") == 0 || strcmp(dts, "f2") == 0 || strcmp(dts, "<f2") == 0)
            esz = 2;
        else
            return srv_fail(e, 422, "UNSUPPORTED_DTYPE", "%s: dtype must be \"float32\" or \"float16\"",
                            lim->what);
        int nd = cJSON_GetArraySize(shape);
        int64_t sh[3] = {0, 0, 0};
        if (nd != 2 && nd != 3)
            return srv_fail(e, 422, "INVALID_SHAPE", "%s: shape must be [n, m, dim] or [total, dim] with "
                            "lengths", lim->what);
        for (int a = 0; a < nd; a++)
            if (get_int(cJSON_GetArrayItem(shape, a), "shape entries", 1, (int64_t)1 << 40, &sh[a], e))
                return -1;
        int64_t d = sh[nd - 1];
        if (d != (int64_t)dim) {
            srv_fail(e, 422, "DIMENSION_MISMATCH", "%s: vectors of dimension %lld; the index's is %u",
                     lim->what, (long long)d, dim);
            cJSON *det = cJSON_CreateObject();
            cJSON_AddNumberToObject(det, "expected_dim", dim);
            cJSON_AddNumberToObject(det, "got_dim", (double)d);
            srv_error_details(e, det);
            return -1;
        }
        if (nd == 3) {
            n = sh[0];
            if (n > lim->max_sets)
                return srv_fail(e, 422, "LIMIT_EXCEEDED", "%s: %lld sets, more than the limit of %lld",
                                lim->what, (long long)n, (long long)lim->max_sets);
            if (sh[1] > lim->max_per_set)
                return srv_fail(e, 422, "LIMIT_EXCEEDED", "%s: %lld vectors per set, more than the limit "
                                "of %lld", lim->what, (long long)sh[1], (long long)lim->max_per_set);
            if (lengths && !cJSON_IsNull(lengths))
                return srv_fail(e, 422, "INVALID_SHAPE", "%s: lengths go with a [total, dim] shape",
                                lim->what);
            total = n * sh[1];
        } else {
            total = sh[0];
            if (!cJSON_IsArray(lengths))
                return srv_fail(e, 422, "INVALID_SHAPE", "%s: a [total, dim] shape needs \"lengths\", "
                                "each set's number of vectors", lim->what);
            n = cJSON_GetArraySize(lengths);
            if (n == 0) return srv_fail(e, 422, "EMPTY", "%s: no sets in lengths", lim->what);
            if (n > lim->max_sets)
                return srv_fail(e, 422, "LIMIT_EXCEEDED", "%s: %lld sets, more than the limit of %lld",
                                lim->what, (long long)n, (long long)lim->max_sets);
        }
        /* the decoded size must be exactly total * dim * esz: check before decoding */
        size_t want = (size_t)total * dim * esz;
        size_t slen = strlen(b64->valuestring), s2 = slen;
        while (s2 > 0 && b64->valuestring[s2 - 1] == '=') s2--;
        if (total > ((int64_t)1 << 40) / (int64_t)dim || s2 / 4 * 3 + (s2 % 4 ? s2 % 4 - 1 : 0) != want)
            return srv_fail(e, 422, "INVALID_SHAPE", "%s: base64 holds %zu bytes; shape and dtype need %zu",
                            lim->what, s2 / 4 * 3 + (s2 % 4 ? s2 % 4 - 1 : 0), want);
        lens = malloc((size_t)n * sizeof *lens);
        if (!lens) goto oom;
        if (nd == 3) {
            for (int64_t i = 0; i < n; i++) lens[i] = sh[1];
        } else {
            /* walked as a list (cJSON_GetArrayItem walks from the head each time: a body
             * of millions of lengths would cost days), and stopped once past total */
            int64_t sum = 0, i = 0;
            for (const cJSON *it = lengths->child; it && i < n; it = it->next, i++) {
                if (get_int(it, "lengths entries", 1, lim->max_per_set, &lens[i], e)) goto fail;
                sum += lens[i];
                if (sum > total) break;
            }
            if (sum != total) {
                srv_fail(e, 422, "INVALID_SHAPE", "%s: lengths add up to %s%lld, the shape has %lld vectors",
                         lim->what, sum > total ? "more than " : "", (long long)(sum > total ? total : sum),
                         (long long)total);
                goto fail;
            }
        }
        unsigned char *raw = NULL;
        size_t raw_len = 0;
        if (b64_decode(b64->valuestring, slen, &raw, &raw_len, e)) goto fail;
        tokens = malloc((size_t)total * dim * sizeof *tokens);
        if (!tokens) {
            free(raw);
            goto oom;
        }
        size_t cnt = (size_t)total * dim;
        if (esz == 4)
            memcpy(tokens, raw, cnt * 4); /* x86 and arm64 Linux are little-endian */
        else
            for (size_t i = 0; i < cnt; i++) tokens[i] = half_to_float(load_le16(raw + 2 * i));
        free(raw);
        for (size_t i = 0; i < cnt; i++)
            if (!isfinite(tokens[i])) {
                srv_fail(e, 422, "INVALID_VALUE", "%s: value %zu (vector %zu) is NaN or infinite",
                         lim->what, i, i / dim);
                goto fail;
            }
    } else {
        return srv_fail(e, 400, "INVALID_REQUEST", "%s must be nested arrays or a base64 object",
                        lim->what);
    }
    *tokens_out = tokens;
    *lens_out = lens;
    *n_out = n;
    *total_out = total;
    return 0;
oom:
    srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
fail:
    free(tokens);
    free(lens);
    return -1;
}

/* An array of ids (integers >= 0) into a new array. */
static int parse_ids(const cJSON *v, const char *what, int64_t max, int64_t **out, int64_t *n_out,
                     srv_error *e)
{
    if (!cJSON_IsArray(v)) return srv_fail(e, 422, "INVALID_VALUE", "%s must be an array of ids", what);
    int64_t n = cJSON_GetArraySize(v);
    if (n > max)
        return srv_fail(e, 422, "LIMIT_EXCEEDED", "%s: %lld ids, more than the limit of %lld", what,
                        (long long)n, (long long)max);
    int64_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
    int64_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        /* ids are int64, but a JSON number is a double: beyond 2^53 ids would round */
        if (get_int(x, "ids", 0, (int64_t)1 << 53, &ids[i], e)) {
            free(ids);
            return -1;
        }
        i++;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

/* filter_args: strings, numbers (bound as numbers: the library binds an argument that is
 * written as a number as one) or booleans (1/0). */
static int parse_filter_args(const cJSON *v, char ***out, int *n_out, srv_error *e)
{
    *out = NULL;
    *n_out = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return srv_fail(e, 422, "INVALID_VALUE", "filter_args must be an array");
    int n = cJSON_GetArraySize(v);
    if (n > 64) return srv_fail(e, 422, "LIMIT_EXCEEDED", "filter_args: %d, more than 64", n);
    char **a = calloc((size_t)n + 1, sizeof *a);
    if (!a) return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        char tmp[64];
        const char *s = NULL;
        if (cJSON_IsString(x)) {
            s = x->valuestring;
        } else if (cJSON_IsNumber(x) && isfinite(x->valuedouble)) {
            double d = x->valuedouble;
            if (d == floor(d) && fabs(d) < 9.0e15)
                snprintf(tmp, sizeof tmp, "%lld", (long long)d);
            else
                snprintf(tmp, sizeof tmp, "%.17g", d);
            s = tmp;
        } else if (cJSON_IsBool(x)) {
            s = cJSON_IsTrue(x) ? "1" : "0";
        }
        if (!s || !(a[i] = strdup(s))) {
            for (int j = 0; j < i; j++) free(a[j]);
            free(a);
            return s ? srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory")
                     : srv_fail(e, 422, "INVALID_VALUE", "filter_args[%d] must be a string, number or "
                                "boolean", i);
        }
        i++;
    }
    *out = a;
    *n_out = n;
    return 0;
}

static void free_args(char **a, int n)
{
    for (int i = 0; a && i < n; i++) free(a[i]);
    free(a);
}

/* What parsing a body may take: cJSON makes one node (its struct and the allocator's
 * header) per JSON value and copies every string, key or value, into an allocation of
 * its own (at least 32 bytes with glibc), so a body of "0,0,0,..." grows ~40-fold and
 * one of {"":"",...} ~30-fold. Counted without parsing, outside strings: a value starts
 * the body, follows each ',' and opens each non-empty container ('[' and '{' bound the
 * last), an upper bound the node count never exceeds; each '"' opening a string adds a
 * copy; each '{' one more node, for the reference a document's object may get from
 * parse_documents. */
static size_t parse_cost(const char *body, size_t len)
{
    const size_t node = sizeof(cJSON) + 2 * sizeof(void *), string_copy = 32;
    size_t values = 1, objects = 0, strings = 0;
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char c = body[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = 0;
        } else if (c == '"') {
            in_string = 1;
            strings++;
        } else if (c == ',' || c == '[' || c == '{') {
            values++;
            objects += c == '{';
        }
    }
    return (values + objects) * node + strings * string_copy + len;
}

/* A parsed body and the share of the server's parse memory (--max-parse-memory) it
 * holds until parsed_body_free. */
typedef struct parsed_body {
    cJSON *root;
    srv_server *srv;
    size_t reserved;
} parsed_body;

static void parsed_body_free(parsed_body *pb)
{
    cJSON_Delete(pb->root);
    pb->root = NULL;
    if (pb->reserved) atomic_fetch_sub(&pb->srv->parse_bytes, pb->reserved);
    pb->reserved = 0;
}

/* Parses the body as a JSON object into pb->root, after reserving what the parse may
 * take from the server's budget: a body that alone needs more is refused (413), one that
 * fits but not beside the parses in flight is told to retry (503). */
static int parse_object(srv_server *srv, const char *body, size_t len, parsed_body *pb,
                        srv_error *e)
{
    *pb = (parsed_body){NULL, srv, 0};
    if (len == 0)
        return srv_fail(e, 400, "BAD_JSON", "the body is empty; a JSON object is expected");
    size_t cost = parse_cost(body, len), budget = srv->cfg.max_parse_memory;
    if (cost > budget)
        return srv_fail(e, 413, "PAYLOAD_TOO_LARGE", "parsing this body would take %zu MiB, "
                        "more than the server's --max-parse-memory of %zu MiB; send embeddings "
                        "as base64 (a tenth of the JSON) or in smaller requests",
                        (cost >> 20) + 1, budget >> 20);
    size_t used = atomic_load(&srv->parse_bytes);
    do {
        if (used > budget - cost)
            return srv_fail(e, 503, "BUSY", "the server is parsing other large bodies "
                            "(--max-parse-memory %zu MiB in use); retry shortly", budget >> 20);
    } while (!atomic_compare_exchange_weak(&srv->parse_bytes, &used, used + cost));
    pb->reserved = cost;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        parsed_body_free(pb);
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        return srv_fail(e, 400, "BAD_JSON", "the body is not valid JSON (near byte %zu)", at);
    }
    pb->root = root;
    /* only whitespace may follow the value */
    for (const char *p = end; p && p < body + len; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            parsed_body_free(pb);
            return srv_fail(e, 400, "BAD_JSON", "the body has data after its JSON value (byte %zu)",
                            (size_t)(p - body));
        }
    if (!cJSON_IsObject(root)) {
        parsed_body_free(pb);
        return srv_fail(e, 400, "BAD_JSON", "the body must be a JSON object");
    }
    return 0;
}

/* ---- search --------------------------------------------------------------------------- */

void srv_search_free(srv_search *s)
{
    if (!s) return;
    free(s->tokens);
    free(s->qlens);
    for (int i = 0; i < s->n_owned_filters; i++) chimera_filter_free(s->owned[i]);
    free(s->owned);
    free(s->filters);
    free(s);
}

static int get_param(const cJSON *params, const char *name, uint32_t *dst, srv_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, name);
    if (!v || cJSON_IsNull(v)) return 0;
    char what[64];
    snprintf(what, sizeof what, "params.%s", name);
    int64_t x;
    if (get_int(v, what, 0, 1 << 24, &x, e)) return -1;
    *dst = (uint32_t)x;
    return 0;
}

/* Builds s->filters from subset / exclude / filter. */
static int search_filters(srv_index *ix, const cJSON *root, srv_search *s, srv_error *e)
{
    const cJSON *subset = cJSON_GetObjectItemCaseSensitive(root, "subset");
    const cJSON *exclude = cJSON_GetObjectItemCaseSensitive(root, "exclude");
    const cJSON *filter = cJSON_GetObjectItemCaseSensitive(root, "filter");
    const cJSON *fargs = cJSON_GetObjectItemCaseSensitive(root, "filter_args");
    if (cJSON_IsNull(subset)) subset = NULL;
    if (cJSON_IsNull(exclude)) exclude = NULL;
    if (cJSON_IsNull(filter)) filter = NULL;
    if ((subset != NULL) + (exclude != NULL) + (filter != NULL) > 1)
        return srv_fail(e, 422, "INVALID_VALUE", "subset, exclude and filter are alternatives");
    if (fargs && !cJSON_IsNull(fargs) && !filter)
        return srv_fail(e, 422, "INVALID_VALUE", "filter_args without filter");
    if (!subset && !exclude && !filter) return 0;
    s->filters = calloc((size_t)s->nq, sizeof *s->filters);
    s->owned = calloc((size_t)s->nq, sizeof *s->owned);
    if (!s->filters || !s->owned) return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
    chimera_error err = {0};
    if (filter) {
        if (ix->remote)
            return srv_fail(e, 422, "UNSUPPORTED", "index %s is sharded: metadata filters are not "
                            "served across shards (use subset or exclude)", ix->name);
        if (!cJSON_IsString(filter))
            return srv_fail(e, 422, "INVALID_VALUE", "filter must be a string (an SQL expression)");
        char **args;
        int na;
        if (parse_filter_args(fargs, &args, &na, e)) return -1;
        chimera_status st = chimera_filter_sql(ix->ix, filter->valuestring, (const char *const *)args,
                                               na, 0, &s->owned[0], &err);
        free_args(args, na);
        if (st != CHIMERA_OK)
            return srv_fail(e, srv_status_of(st), "INVALID_FILTER", "filter: %s", err.msg);
        s->n_owned_filters = 1;
        for (int64_t i = 0; i < s->nq; i++) s->filters[i] = s->owned[0];
        return 0;
    }
    const cJSON *list = subset ? subset : exclude;
    const char *what = subset ? "subset" : "exclude";
    if (!cJSON_IsArray(list)) return srv_fail(e, 422, "INVALID_VALUE", "%s must be an array", what);
    int per_query = cJSON_GetArraySize(list) > 0 && cJSON_IsArray(cJSON_GetArrayItem(list, 0));
    if (per_query && cJSON_GetArraySize(list) != s->nq)
        return srv_fail(e, 422, "INVALID_VALUE", "%s: %d lists for %lld queries (one list per query, "
                        "or one list of ids for all)", what, cJSON_GetArraySize(list), (long long)s->nq);
    int64_t q = 0;
    const cJSON *item = per_query ? list->child : list;
    do {
        int64_t *ids, n;
        if (parse_ids(item, what, (int64_t)1 << 26, &ids, &n, e)) return -1;
        chimera_status st = chimera_filter_new(ids, n, exclude != NULL, &s->owned[s->n_owned_filters], &err);
        free(ids);
        if (st != CHIMERA_OK) return srv_fail(e, srv_status_of(st), "INVALID_VALUE", "%s: %s", what, err.msg);
        chimera_filter *f = s->owned[s->n_owned_filters++];
        if (per_query) {
            s->filters[q++] = f;
            item = item->next;
        } else {
            for (int64_t i = 0; i < s->nq; i++) s->filters[i] = f;
        }
    } while (per_query && item);
    return 0;
}

int srv_parse_search(srv_index *ix, const srv_config *cfg, const char *body, size_t len,
                     srv_search **out, srv_error *e)
{
    *out = NULL;
    parsed_body pb;
    if (parse_object(ix->srv, body, len, &pb, e)) return -1;
    const cJSON *root = pb.root;
    srv_search *s = calloc(1, sizeof *s);
    if (!s) {
        parsed_body_free(&pb);
        return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
    }
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "queries");
    if (!q) {
        srv_fail(e, 400, "INVALID_REQUEST", "\"queries\" is required");
        goto fail;
    }
    vec_limits lim = {"queries", cfg->max_queries, cfg->max_query_tokens};
    if (parse_vectors(q, cJSON_GetObjectItemCaseSensitive(root, "lengths"), ix->dim, &lim, &s->tokens,
                      &s->qlens, &s->nq, &s->n_tokens, e))
        goto fail;
    int64_t k = 10;
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "k");
    if (kv && !cJSON_IsNull(kv) && get_int(kv, "k", 1, cfg->max_k, &k, e)) goto fail;
    s->k = (uint32_t)k;
    const cJSON *recall = cJSON_GetObjectItemCaseSensitive(root, "recall");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "params");
    chimera_search_params p = {0};
    if (params && !cJSON_IsNull(params)) {
        if (!cJSON_IsObject(params)) {
            srv_fail(e, 422, "INVALID_VALUE", "params must be an object");
            goto fail;
        }
        if (get_param(params, "n_probe", &p.n_probe, e) || get_param(params, "k_refine", &p.k_refine, e) ||
            get_param(params, "k_fullbit", &p.k_fullbit, e) || get_param(params, "chunks", &p.chunks, e) ||
            get_param(params, "rerank_depth", &p.rerank_depth, e) ||
            get_param(params, "k_interaction", &p.k_interaction, e))
            goto fail;
        const cJSON *imp = cJSON_GetObjectItemCaseSensitive(params, "impute");
        if (imp && !cJSON_IsNull(imp) &&
            (!cJSON_IsString(imp) || chimera_impute_parse(imp->valuestring, &p.impute) != CHIMERA_OK)) {
            srv_fail(e, 422, "INVALID_VALUE", "params.impute must be \"probe\", \"zero\" or \"min\"");
            goto fail;
        }
        /* given, even as the default, impute and probe are the request's over a profile's */
        if (imp && !cJSON_IsNull(imp)) p.chosen |= CHIMERA_CHOSE_IMPUTE;
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(params, "impute_scale");
        if (sc && !cJSON_IsNull(sc)) {
            if (!cJSON_IsNumber(sc) || !(sc->valuedouble > 0 && sc->valuedouble <= 1)) {
                srv_fail(e, 422, "INVALID_VALUE", "params.impute_scale must be a number in (0, 1]");
                goto fail;
            }
            p.impute_scale = (float)sc->valuedouble;
        }
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(params, "probe");
        if (pr && !cJSON_IsNull(pr) &&
            (!cJSON_IsString(pr) || chimera_probe_parse(pr->valuestring, &p.probe) != CHIMERA_OK)) {
            srv_fail(e, 422, "INVALID_VALUE", "params.probe must be \"auto\", \"brute\" or \"graph\"");
            goto fail;
        }
        if (pr && !cJSON_IsNull(pr)) p.chosen |= CHIMERA_CHOSE_PROBE;
    }
    if (recall && !cJSON_IsNull(recall)) {
        if (!cJSON_IsNumber(recall) || !(recall->valuedouble > 0 && recall->valuedouble <= 1)) {
            srv_fail(e, 422, "INVALID_VALUE", "recall must be a number in (0, 1]");
            goto fail;
        }
        if (ix->remote) {
            srv_fail(e, 422, "NO_PROFILE", "index %s is sharded: tuned profiles are per shard; "
                     "give params", ix->name);
            goto fail;
        }
        chimera_search_params tuned;
        chimera_error err = {0};
        chimera_status ps = chimera_index_profile_get(ix->ix, s->k, recall->valuedouble, &tuned, &err);
        if (ps != CHIMERA_OK) {
            if (err.msg[0])
                srv_fail(e, 422, "NO_PROFILE", "%s", err.msg);
            else
                srv_fail(e, 422, "NO_PROFILE", "index %s has no tuned profile for k=%u at recall >= %.3f; "
                         "run chimera tune on it", ix->name, s->k, recall->valuedouble);
            goto fail;
        }
        /* the library fills the fields left unset from the profile (explicit parameters
         * win, as on the command line) and deepens its depths for filtered queries */
        p.recall = recall->valuedouble;
    }
    /* Unset fields stay 0 for the library to fill: its defaults depend on the call (a
     * filtered search takes more candidates when k_fullbit is its default), so filling
     * them here would give other results than the library's own defaults. A setting the
     * library refuses (k_fullbit < k, say) fails the request alone (batch.c) with 422. */
    s->params = p;
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(root, "profile");
    if (prof && !cJSON_IsNull(prof) && !cJSON_IsBool(prof)) {
        srv_fail(e, 422, "INVALID_VALUE", "profile must be true or false");
        goto fail;
    }
    s->profile = cJSON_IsTrue(prof);
    if (search_filters(ix, root, s, e)) goto fail;
    parsed_body_free(&pb);
    *out = s;
    return 0;
fail:
    parsed_body_free(&pb);
    srv_search_free(s);
    return -1;
}

/* ---- documents ------------------------------------------------------------------------ */

void srv_write_free(srv_write *w)
{
    if (!w) return;
    free(w->tokens);
    free(w->doclens);
    free(w->ids);
    free(w->metadata_jsonl);
    free(w->filter);
    free_args(w->filter_args, w->n_filter_args);
    free(w);
}

/* Appends `rec` (an object, or null: no record) as one JSON Lines record with "id". */
static int add_meta_line(char **buf, size_t *len, size_t *cap, int64_t id, const cJSON *rec,
                         int64_t i, srv_error *e)
{
    if (!rec || cJSON_IsNull(rec)) return 0;
    if (!cJSON_IsObject(rec))
        return srv_fail(e, 422, "INVALID_VALUE", "metadata[%lld] must be an object or null", (long long)i);
    /* {"id": id, fields of rec but its own "id"}: rec's members are referenced, not copied */
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddNumberToObject(o, "id", (double)id) != NULL;
    for (const cJSON *f = rec->child; ok && f; f = f->next)
        if (f->string && strcmp(f->string, "id") != 0)
            ok = cJSON_AddItemReferenceToObject(o, f->string, (cJSON *)f);
    char *line = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!line) return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
    size_t n = strlen(line);
    if (*len + n + 2 > *cap) {
        size_t c = *cap ? *cap * 2 : 4096;
        while (c < *len + n + 2) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) {
            free(line);
            return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
        }
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, line, n);
    *len += n;
    (*buf)[(*len)++] = '\n';
    (*buf)[*len] = '\0';
    free(line);
    return 0;
}

/* Documents: {"documents": [{"id", "embeddings", "metadata"?}, ...]} or the columnar
 * {"ids": [...], "embeddings": ..., "lengths"?: [...], "metadata"?: [...]}. */
static int parse_documents(srv_index *ix, const cJSON *root, srv_write *w, srv_error *e)
{
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(root, "documents");
    char *meta = NULL;
    size_t mlen = 0, mcap = 0;
    const int64_t max_docs = 1 << 24, max_tokens = 1 << 20;
    if (docs) {
        if (!cJSON_IsArray(docs) || cJSON_GetArraySize(docs) == 0)
            return srv_fail(e, 422, "INVALID_VALUE", "documents must be a non-empty array");
        int64_t n = cJSON_GetArraySize(docs);
        if (n > max_docs)
            return srv_fail(e, 422, "LIMIT_EXCEEDED", "documents: %lld, more than %lld", (long long)n,
                            (long long)max_docs);
        /* Build the nested array of all embeddings, parse it as one set of sets. Items are
         * referenced, not copied. */
        cJSON *all = cJSON_CreateArray();
        w->ids = malloc((size_t)n * sizeof *w->ids);
        if (!all || !w->ids) {
            cJSON_Delete(all);
            return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
        }
        int64_t i = 0;
        const cJSON *d;
        int rc = 0;
        cJSON_ArrayForEach(d, docs) {
            const cJSON *emb = cJSON_IsObject(d) ? cJSON_GetObjectItemCaseSensitive(d, "embeddings") : NULL;
            const cJSON *id = cJSON_IsObject(d) ? cJSON_GetObjectItemCaseSensitive(d, "id") : NULL;
            if (!emb || !id) {
                rc = srv_fail(e, 422, "INVALID_VALUE", "documents[%lld] needs \"id\" and \"embeddings\"",
                              (long long)i);
                break;
            }
            if (get_int(id, "documents[].id", 0, (int64_t)1 << 53, &w->ids[i], e)) {
                rc = -1;
                break;
            }
            if (!cJSON_IsArray(emb)) {
                rc = srv_fail(e, 422, "INVALID_VALUE", "documents[%lld].embeddings must be an array of "
                              "vectors", (long long)i);
                break;
            }
            if (!cJSON_AddItemReferenceToArray(all, (cJSON *)emb)) {
                rc = srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
                break;
            }
            if (add_meta_line(&meta, &mlen, &mcap, w->ids[i], cJSON_GetObjectItemCaseSensitive(d, "metadata"),
                              i, e)) {
                rc = -1;
                break;
            }
            i++;
        }
        vec_limits lim = {"documents", max_docs, max_tokens};
        int64_t nd = 0;
        if (rc == 0)
            rc = parse_vectors(all, NULL, ix->dim, &lim, &w->tokens, &w->doclens, &nd, &w->n_tokens, e);
        cJSON_Delete(all);
        w->n_docs = n;
        if (rc) {
            free(meta);
            return -1;
        }
    } else {
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "ids");
        const cJSON *emb = cJSON_GetObjectItemCaseSensitive(root, "embeddings");
        if (!ids || !emb)
            return srv_fail(e, 400, "INVALID_REQUEST", "give \"documents\", or \"ids\" and \"embeddings\"");
        int64_t nids;
        if (parse_ids(ids, "ids", max_docs, &w->ids, &nids, e)) return -1;
        vec_limits lim = {"embeddings", max_docs, max_tokens};
        if (parse_vectors(emb, cJSON_GetObjectItemCaseSensitive(root, "lengths"), ix->dim, &lim, &w->tokens,
                          &w->doclens, &w->n_docs, &w->n_tokens, e))
            return -1;
        if (nids != w->n_docs)
            return srv_fail(e, 422, "INVALID_VALUE", "%lld ids for %lld documents", (long long)nids,
                            (long long)w->n_docs);
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
        if (md && !cJSON_IsNull(md)) {
            if (!cJSON_IsArray(md) || cJSON_GetArraySize(md) != w->n_docs)
                return srv_fail(e, 422, "INVALID_VALUE", "metadata must be an array with one entry (an "
                                "object or null) per document");
            int64_t i = 0;
            const cJSON *r;
            cJSON_ArrayForEach(r, md) {
                if (add_meta_line(&meta, &mlen, &mcap, w->ids[i], r, i, e)) {
                    free(meta);
                    return -1;
                }
                i++;
            }
        }
    }
    w->metadata_jsonl = meta;
    return 0;
}

int srv_parse_write(srv_index *ix, const srv_config *cfg, srv_write_kind kind, const char *body,
                    size_t len, srv_write **out, srv_error *e)
{
    (void)cfg;
    *out = NULL;
    parsed_body pb;
    if (parse_object(ix->srv, body, len, &pb, e)) return -1;
    const cJSON *root = pb.root;
    srv_write *w = calloc(1, sizeof *w);
    if (!w) {
        parsed_body_free(&pb);
        return srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
    }
    w->kind = kind;
    const cJSON *mok = cJSON_GetObjectItemCaseSensitive(root, "missing_ok");
    if (mok && !cJSON_IsNull(mok) && !cJSON_IsBool(mok)) {
        srv_fail(e, 422, "INVALID_VALUE", "missing_ok must be true or false");
        goto fail;
    }
    w->missing_ok = cJSON_IsTrue(mok);
    if (kind == SRV_WRITE_DELETE) {
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "ids");
        const cJSON *filter = cJSON_GetObjectItemCaseSensitive(root, "filter");
        if ((ids != NULL) == (filter != NULL)) {
            srv_fail(e, 400, "INVALID_REQUEST", "give either \"ids\" or \"filter\" (with \"filter_args\")");
            goto fail;
        }
        if (ids) {
            if (parse_ids(ids, "ids", (int64_t)1 << 26, &w->ids, &w->n_docs, e)) goto fail;
        } else {
            if (ix->remote) {
                srv_fail(e, 422, "UNSUPPORTED", "index %s is sharded: delete by ids (metadata "
                         "filters are not served across shards)", ix->name);
                goto fail;
            }
            if (!cJSON_IsString(filter)) {
                srv_fail(e, 422, "INVALID_VALUE", "filter must be a string (an SQL expression)");
                goto fail;
            }
            if (!(w->filter = strdup(filter->valuestring))) {
                srv_fail(e, 503, "OUT_OF_MEMORY", "out of memory");
                goto fail;
            }
            if (parse_filter_args(cJSON_GetObjectItemCaseSensitive(root, "filter_args"), &w->filter_args,
                                  &w->n_filter_args, e))
                goto fail;
        }
    } else if (parse_documents(ix, root, w, e)) {
        goto fail;
    }
    if (ix->remote && w->metadata_jsonl && w->metadata_jsonl[0]) {
        srv_fail(e, 422, "UNSUPPORTED", "index %s is sharded: documents are added without "
                 "metadata (its shards keep none)", ix->name);
        goto fail;
    }
    parsed_body_free(&pb);
    *out = w;
    return 0;
fail:
    parsed_body_free(&pb);
    srv_write_free(w);
    return -1;
}
