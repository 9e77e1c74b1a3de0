/* Loading records: JSON Lines and CSV readers, column typing, and the all-or-nothing
 * write into the meta table (meta.h: meta_load_text and its wrappers).
 *
 * Two passes over the input held in memory. The first parses every record and checks
 * everything that can be wrong with the input (syntax, encoding, ids, names, the column
 * count, type conflicts with existing columns, duplicate ids) while it collects each
 * column's kinds of values; only then are the column types known (a column is INTEGER,
 * REAL or TEXT according to all its values, meta.h), and the second pass parses again
 * and writes, inside one savepoint. Parsing twice costs less than keeping every value
 * of a large input, and a malformed input touches nothing in the database.
 *
 * JSON Lines: one object per line; blank lines are skipped; `\r\n` is accepted; a UTF-8
 * byte-order mark at the start is skipped. The parser is our own and strict (RFC 8259):
 * SQLite's JSON functions would parse too, but report neither where a line is wrong nor
 * a duplicate key, and this one stays small because a record is one flat object. Nested
 * arrays and objects are checked (depth at most META_JSON_MAX_DEPTH) and kept as written.
 * A string may not contain \u0000 (SQLite's text functions stop at a NUL). An integer
 * literal beyond int64 is a REAL (as SQLite's own JSON does); a number beyond double's
 * range is an error.
 *
 * CSV (RFC 4180): a header row of field names, then one record per row, `,` between
 * fields, `"` quoting (`""` inside quotes is a quote; a quoted field may span lines, and
 * messages give the line where its record starts); blank lines are skipped. CSV has no
 * types: an empty field is NULL (a quoted empty field "" is the empty string), a field written as a JSON number is an INTEGER or REAL
 * ("12", "-3", "2.5", "1e3"; but "007", "+5", ".5" and "1." are TEXT, so codes such as
 * zip codes keep their zeros), anything else is TEXT.
 *
 * Encoding: the input must be UTF-8. Invalid UTF-8 (overlong forms and surrogates
 * included), a NUL byte, or a UTF-16/32 byte-order mark fails with the line.
 *
 * Tried and rejected: a staging table typed by SQLite's own affinity (INSERT everything,
 * then CREATE TABLE ... AS SELECT with CASTs) wrote the whole input before it could
 * report a duplicate id or a bad line, and made the error paths larger, not smaller. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "meta/meta_impl.h"
#include "core/alloc.h"

#define META_JSON_MAX_DEPTH 32  /* nesting of arrays/objects inside a field's value */
#define META_MAX_FIELDS 1024    /* fields in one record (columns are capped lower) */

/* ---- values and records ------------------------------------------------------------ */

typedef enum vkind { V_NULL, V_INT, V_REAL, V_BOOL, V_TEXT, V_JSON } vkind;

typedef struct value {
    vkind kind;
    int64_t i;      /* V_INT, V_BOOL (0/1) */
    double r;       /* V_REAL */
    const char *s;  /* V_TEXT: the decoded text; V_INT/V_REAL/V_JSON: as written */
    size_t len;
    size_t off;     /* while parsing: offset of decoded text in the reader's buffer */
    int in_buf;
} value;

typedef struct field {
    const char *name; /* resolved after the record is parsed */
    size_t name_len;
    size_t name_off;
    int name_in_buf;
    value v;
} field;

typedef struct reader {
    const char *text, *end, *pos;
    const char *source;
    meta_input_format fmt;
    int64_t line;      /* physical line where the current record starts (1-based) */
    int64_t next_line; /* line number of *pos */
    char *buf;         /* decoded strings of the current record */
    size_t buf_len, buf_cap;
    field *f;
    int nf, f_cap;
    /* CSV: the header's names (in hdr_buf) */
    char *hdr_buf;
    size_t *hdr_off, *hdr_len;
    int n_hdr;
} reader;

static chimera_status rfail(reader *r, chimera_error *err, const char *fmt, ...) CM_PRINTF(3, 4);

static chimera_status rfail(reader *r, chimera_error *err, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cm_fail(err, CHIMERA_ERR_FORMAT, "%s:%lld: %s", r->source, (long long)r->line, what);
}

static int buf_put(reader *r, const char *p, size_t n)
{
    if (r->buf_len + n + 1 > r->buf_cap) {
        size_t cap = r->buf_cap ? r->buf_cap : 256;
        while (r->buf_len + n + 1 > cap) cap *= 2;
        char *nb = cm_realloc(r->buf, cap);
        if (!nb) return -1;
        r->buf = nb;
        r->buf_cap = cap;
    }
    memcpy(r->buf + r->buf_len, p, n);
    r->buf_len += n;
    r->buf[r->buf_len] = '\0';
    return 0;
}

static field *new_field(reader *r)
{
    if (r->nf == r->f_cap) {
        int cap = r->f_cap ? 2 * r->f_cap : 16;
        field *nf = cm_realloc(r->f, (size_t)cap * sizeof *nf);
        if (!nf) return NULL;
        r->f = nf;
        r->f_cap = cap;
    }
    field *fl = &r->f[r->nf++];
    memset(fl, 0, sizeof *fl);
    return fl;
}

/* Turns buffer offsets into pointers once the record's buffer stops growing. */
static void resolve(reader *r)
{
    for (int i = 0; i < r->nf; i++) {
        field *fl = &r->f[i];
        if (fl->name_in_buf) fl->name = r->buf + fl->name_off;
        if (fl->v.in_buf) fl->v.s = r->buf + fl->v.off;
    }
}

int meta_parse_number(const char *s, size_t n, int64_t *iv, double *rv)
{
    size_t i = 0;
    int integral = 1;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return 0;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return 0;
    if (i < n && s[i] == '.') {
        integral = 0;
        i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        integral = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    if (i != n) return 0;
    if (integral) {
        int neg = s[0] == '-';
        uint64_t acc = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        int over = 0;
        for (size_t k = (size_t)neg; k < n; k++) {
            uint64_t d = (uint64_t)(s[k] - '0');
            if (acc > (lim - d) / 10) {
                over = 1;
                break;
            }
            acc = acc * 10 + d;
        }
        if (!over) {
            *iv = neg ? (acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc) : (int64_t)acc;
            return 1;
        }
    }
    char tmp[512];
    if (n >= sizeof tmp) return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    double d = strtod(tmp, NULL);
    if (!isfinite(d)) return -1;
    *rv = d;
    return 2;
}

/* meta_parse_number into a value (s/len keep the number as written). */
static int classify_number(const char *s, size_t n, value *v)
{
    int64_t i = 0;
    double d = 0;
    int k = meta_parse_number(s, n, &i, &d);
    if (k <= 0) return k;
    v->kind = k == 1 ? V_INT : V_REAL;
    v->i = i;
    v->r = d;
    v->s = s;
    v->len = n;
    v->in_buf = 0;
    return 1;
}

/* ---- encoding ---------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (< end), or 0 if invalid. */
static int utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if (c == 0xED) n = 3, hi = 0x9F; /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) n = 3;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    if (end - p < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int k = 2; k < n; k++)
        if (p[k] < 0x80 || p[k] > 0xBF) return 0;
    return n;
}

/* Skips a UTF-8 byte-order mark and checks the whole input is UTF-8 without NULs. */
static chimera_status check_encoding(reader *r, chimera_error *err)
{
    const unsigned char *p = (const unsigned char *)r->text, *end = (const unsigned char *)r->end;
    r->line = 1;
    if (end - p >= 2 && ((p[0] == 0xFF && p[1] == 0xFE) || (p[0] == 0xFE && p[1] == 0xFF)))
        return rfail(r, err, "UTF-16 or UTF-32 text (a byte-order mark); convert it to UTF-8");
    if (end - p >= 4 && p[0] == 0 && p[1] == 0 && p[2] == 0xFE && p[3] == 0xFF)
        return rfail(r, err, "UTF-32 text (a byte-order mark); convert it to UTF-8");
    if (end - p >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF) {
        p += 3;
        r->text += 3;
    }
    while (p < end) {
        if (*p == '\n') {
            r->line++;
            p++;
        } else if (*p == 0) {
            return rfail(r, err, "a NUL byte (column %lld): not UTF-8 text (UTF-16?)",
                         (long long)(p - (const unsigned char *)r->text) + 1);
        } else {
            int n = utf8_len(p, end);
            if (!n) return rfail(r, err, "invalid UTF-8 (byte 0x%02X); the input must be UTF-8", *p);
            p += n;
        }
    }
    r->line = 0;
    return CHIMERA_OK;
}

/* ---- JSON Lines ---------------------------------------------------------------------- */

typedef struct jp {
    reader *r;
    const char *p, *start, *end; /* the line */
} jp;

static void jws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r')) j->p++;
}

static long long jcol(const jp *j)
{
    return (long long)(j->p - j->start) + 1;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* Parses a string at j->p ('"'), decoding it into the reader's buffer; *off and *len give
 * where. Returns CHIMERA_OK or a FORMAT/NOMEM failure. */
static chimera_status jstring(jp *j, size_t *off, size_t *len, chimera_error *err)
{
    reader *r = j->r;
    size_t start = r->buf_len;
    j->p++; /* the quote */
    for (;;) {
        const char *q = j->p;
        while (q < j->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
        if (buf_put(r, j->p, (size_t)(q - j->p))) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
        j->p = q;
        if (q == j->end) return rfail(r, err, "unterminated string (column %lld)", jcol(j));
        if (*q == '"') {
            j->p++;
            break;
        }
        if ((unsigned char)*q < 0x20)
            return rfail(r, err, "a control character inside a string (column %lld)", jcol(j));
        /* an escape */
        if (j->end - q < 2) return rfail(r, err, "unterminated string (column %lld)", jcol(j));
        char e = q[1], out[4];
        int n = 1;
        j->p = q + 2;
        switch (e) {
        case '"': out[0] = '"'; break;
        case '\\': out[0] = '\\'; break;
        case '/': out[0] = '/'; break;
        case 'b': out[0] = '\b'; break;
        case 'f': out[0] = '\f'; break;
        case 'n': out[0] = '\n'; break;
        case 'r': out[0] = '\r'; break;
        case 't': out[0] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (j->end - j->p < 4 || hex4(j->p, &cp))
                return rfail(r, err, "a bad \\u escape (column %lld)", jcol(j));
            j->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return rfail(r, err, "a lone UTF-16 surrogate in a \\u escape (column %lld)", jcol(j));
                j->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return rfail(r, err, "a lone UTF-16 surrogate in a \\u escape (column %lld)", jcol(j));
            }
            if (cp == 0) return rfail(r, err, "\\u0000 inside a string (column %lld): text may not hold NUL", jcol(j));
            if (cp < 0x80) out[0] = (char)cp;
            else if (cp < 0x800) {
                out[0] = (char)(0xC0 | (cp >> 6));
                out[1] = (char)(0x80 | (cp & 0x3F));
                n = 2;
            } else if (cp < 0x10000) {
                out[0] = (char)(0xE0 | (cp >> 12));
                out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[2] = (char)(0x80 | (cp & 0x3F));
                n = 3;
            } else {
                out[0] = (char)(0xF0 | (cp >> 18));
                out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[3] = (char)(0x80 | (cp & 0x3F));
                n = 4;
            }
            break;
        }
        default: return rfail(r, err, "a bad escape '\\%c' (column %lld)", e, jcol(j) - 1);
        }
        if (buf_put(r, out, (size_t)n)) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    }
    *off = start;
    *len = r->buf_len - start;
    return CHIMERA_OK;
}

static chimera_status jvalue(jp *j, value *v, int depth, chimera_error *err);

/* An array or object inside a field: checked, kept as written (V_JSON). */
static chimera_status jnested(jp *j, value *v, int depth, chimera_error *err)
{
    reader *r = j->r;
    if (depth > META_JSON_MAX_DEPTH)
        return rfail(r, err, "nested deeper than %d levels (column %lld)", META_JSON_MAX_DEPTH, jcol(j));
    const char *start = j->p;
    char close = *j->p == '[' ? ']' : '}';
    j->p++;
    jws(j);
    size_t mark = r->buf_len; /* decoded strings of the nested value are not kept */
    if (j->p < j->end && *j->p == close) {
        j->p++;
    } else {
        for (;;) {
            value tmp;
            if (close == '}') {
                if (j->p >= j->end || *j->p != '"')
                    return rfail(r, err, "expected a key string (column %lld)", jcol(j));
                size_t o, l;
                CM_TRY(jstring(j, &o, &l, err));
                jws(j);
                if (j->p >= j->end || *j->p != ':')
                    return rfail(r, err, "expected ':' after a key (column %lld)", jcol(j));
                j->p++;
                jws(j);
            }
            CM_TRY(jvalue(j, &tmp, depth + 1, err));
            jws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                jws(j);
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                break;
            }
            return rfail(r, err, "expected ',' or '%c' (column %lld)", close, jcol(j));
        }
    }
    r->buf_len = mark;
    v->kind = V_JSON;
    v->s = start;
    v->len = (size_t)(j->p - start);
    v->in_buf = 0;
    return CHIMERA_OK;
}

static chimera_status jvalue(jp *j, value *v, int depth, chimera_error *err)
{
    reader *r = j->r;
    memset(v, 0, sizeof *v);
    if (j->p >= j->end) return rfail(r, err, "expected a value (column %lld)", jcol(j));
    char c = *j->p;
    if (c == '"') {
        v->kind = V_TEXT;
        v->in_buf = 1;
        return jstring(j, &v->off, &v->len, err);
    }
    if (c == '[' || c == '{') return jnested(j, v, depth, err);
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *q = j->p;
        while (q < j->end && ((*q >= '0' && *q <= '9') || *q == '-' || *q == '+' || *q == '.' ||
                              *q == 'e' || *q == 'E'))
            q++;
        int k = classify_number(j->p, (size_t)(q - j->p), v);
        if (k == 0) return rfail(r, err, "a malformed number (column %lld)", jcol(j));
        if (k < 0) return rfail(r, err, "a number out of range (column %lld)", jcol(j));
        j->p = q;
        return CHIMERA_OK;
    }
    static const struct { const char *word; vkind kind; int64_t i; } words[] = {
        {"true", V_BOOL, 1}, {"false", V_BOOL, 0}, {"null", V_NULL, 0}};
    for (size_t w = 0; w < 3; w++) {
        size_t n = strlen(words[w].word);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, words[w].word, n) == 0) {
            v->kind = words[w].kind;
            v->i = words[w].i;
            v->s = j->p;
            v->len = n;
            j->p += n;
            return CHIMERA_OK;
        }
    }
    return rfail(r, err, "expected a value (column %lld)", jcol(j));
}

/* Parses one line (a JSON object) into the reader's fields. */
static chimera_status jline(reader *r, const char *start, const char *end, chimera_error *err)
{
    jp j = {r, start, start, end};
    jws(&j);
    if (j.p >= j.end || *j.p != '{')
        return rfail(r, err, "expected a JSON object '{' (column %lld)", jcol(&j));
    j.p++;
    jws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            if (j.p >= j.end || *j.p != '"')
                return rfail(r, err, "expected a field name in quotes (column %lld)", jcol(&j));
            if (r->nf == META_MAX_FIELDS)
                return rfail(r, err, "more than %d fields", META_MAX_FIELDS);
            field *fl = new_field(r);
            if (!fl) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
            fl->name_in_buf = 1;
            CM_TRY(jstring(&j, &fl->name_off, &fl->name_len, err));
            jws(&j);
            if (j.p >= j.end || *j.p != ':')
                return rfail(r, err, "expected ':' after a field name (column %lld)", jcol(&j));
            j.p++;
            jws(&j);
            CM_TRY(jvalue(&j, &fl->v, 1, err));
            jws(&j);
            if (j.p < j.end && *j.p == ',') {
                j.p++;
                jws(&j);
                continue;
            }
            if (j.p < j.end && *j.p == '}') {
                j.p++;
                break;
            }
            return rfail(r, err, "expected ',' or '}' (column %lld)", jcol(&j));
        }
    }
    jws(&j);
    if (j.p != j.end) return rfail(r, err, "text after the object (column %lld)", jcol(&j));
    resolve(r);
    return CHIMERA_OK;
}

/* ---- CSV ------------------------------------------------------------------------------ */

/* Parses one CSV record at r->pos into fields (names unset). Returns CHIMERA_OK with
 * r->nf fields, or a failure. A blank line gives nf = 0. */
static chimera_status csv_record(reader *r, chimera_error *err)
{
    const char *p = r->pos, *end = r->end;
    r->line = r->next_line;
    if (p < end && (*p == '\n' || (*p == '\r' && p + 1 < end && p[1] == '\n'))) {
        r->pos = p + (*p == '\r' ? 2 : 1);
        r->next_line++;
        return CHIMERA_OK;
    }
    for (;;) {
        if (r->nf == META_MAX_FIELDS) return rfail(r, err, "more than %d fields", META_MAX_FIELDS);
        field *fl = new_field(r);
        if (!fl) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
        value *v = &fl->v;
        if (p < end && *p == '"') {
            int64_t open_line = r->next_line;
            size_t start = r->buf_len;
            p++;
            for (;;) {
                const char *q = p;
                while (q < end && *q != '"') {
                    if (*q == '\n') r->next_line++;
                    q++;
                }
                if (buf_put(r, p, (size_t)(q - p))) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
                if (q == end) {
                    r->line = open_line;
                    return rfail(r, err, "a quoted field is never closed");
                }
                if (q + 1 < end && q[1] == '"') {
                    if (buf_put(r, "\"", 1)) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
                    p = q + 2;
                    continue;
                }
                p = q + 1;
                break;
            }
            v->kind = V_TEXT;
            v->in_buf = 1;
            v->off = start;
            v->len = r->buf_len - start;
            if (p < end && *p != ',' && *p != '\n' && !(*p == '\r' && p + 1 < end && p[1] == '\n'))
                return rfail(r, err, "text after a closing quote in field %d", r->nf);
        } else {
            const char *q = p;
            while (q < end && *q != ',' && *q != '\n') {
                if (*q == '"') return rfail(r, err, "a quote inside unquoted field %d", r->nf);
                if (*q == '\r' && !(q + 1 < end && q[1] == '\n'))
                    return rfail(r, err, "a carriage return inside field %d", r->nf);
                if (*q == '\r') break;
                q++;
            }
            v->kind = q == p ? V_NULL : V_TEXT;
            v->s = p;
            v->len = (size_t)(q - p);
            v->in_buf = 0;
            p = q;
        }
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '\r') p++;
        if (p < end && *p == '\n') {
            p++;
            r->next_line++;
        }
        break;
    }
    r->pos = p;
    resolve(r);
    /* types: a field written as a JSON number is one */
    for (int i = 0; i < r->nf; i++) {
        value *v = &r->f[i].v;
        if (v->kind != V_TEXT || v->len == 0) continue;
        value num;
        int k = classify_number(v->s, v->len, &num);
        if (k < 0) return rfail(r, err, "a number out of range in field %d", i + 1);
        if (k > 0) *v = num;
    }
    return CHIMERA_OK;
}

/* Reads the header row: the field names. */
static chimera_status csv_header(reader *r, chimera_error *err)
{
    do {
        if (r->pos >= r->end) {
            r->line = r->next_line;
            return rfail(r, err, "no header row");
        }
        r->nf = 0;
        r->buf_len = 0;
        CM_TRY(csv_record(r, err));
    } while (r->nf == 0);
    /* the names as written (a value's s/len is its text whatever its kind) */
    r->hdr_off = cm_malloc((size_t)r->nf * sizeof *r->hdr_off);
    r->hdr_len = cm_malloc((size_t)r->nf * sizeof *r->hdr_len);
    size_t total = 0;
    for (int i = 0; i < r->nf; i++) total += r->f[i].v.len + 1;
    r->hdr_buf = cm_malloc(total ? total : 1);
    if (!r->hdr_off || !r->hdr_len || !r->hdr_buf) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    size_t o = 0;
    for (int i = 0; i < r->nf; i++) {
        const value *v = &r->f[i].v;
        if (v->kind == V_NULL) return rfail(r, err, "header field %d is empty", i + 1);
        memcpy(r->hdr_buf + o, v->s, v->len);
        r->hdr_buf[o + v->len] = '\0';
        r->hdr_off[i] = o;
        r->hdr_len[i] = v->len;
        o += v->len + 1;
    }
    r->n_hdr = r->nf;
    return CHIMERA_OK;
}

/* ---- the reader over both formats -------------------------------------------------- */

static void reader_init(reader *r, meta_input_format fmt, const char *text, size_t len,
                        const char *source)
{
    memset(r, 0, sizeof *r);
    r->fmt = fmt;
    r->text = text;
    r->end = text + len;
    r->source = source;
}

static void reader_free(reader *r)
{
    cm_free(r->buf);
    cm_free(r->f);
    cm_free(r->hdr_buf);
    cm_free(r->hdr_off);
    cm_free(r->hdr_len);
}

/* Positions the reader at the first record (checks the encoding, reads a CSV header). */
static chimera_status reader_start(reader *r, chimera_error *err)
{
    CM_TRY(check_encoding(r, err));
    r->pos = r->text;
    r->next_line = 1;
    if (r->fmt == META_INPUT_CSV) CM_TRY(csv_header(r, err));
    return CHIMERA_OK;
}

/* Reads the next record into r->f[0..nf). *got = 0 at the end of the input. */
static chimera_status reader_next(reader *r, int *got, chimera_error *err)
{
    *got = 0;
    for (;;) {
        r->nf = 0;
        r->buf_len = 0;
        if (r->pos >= r->end) return CHIMERA_OK;
        if (r->fmt == META_INPUT_JSONL) {
            const char *nl = memchr(r->pos, '\n', (size_t)(r->end - r->pos));
            const char *le = nl ? nl : r->end;
            r->line = r->next_line++;
            const char *s = r->pos;
            r->pos = nl ? nl + 1 : r->end;
            const char *q = s;
            while (q < le && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
            if (q == le) continue; /* blank */
            CM_TRY(jline(r, s, le, err));
        } else {
            CM_TRY(csv_record(r, err));
            if (r->nf == 0) continue;
            if (r->nf != r->n_hdr)
                return rfail(r, err, "%d fields, but the header has %d", r->nf, r->n_hdr);
            for (int i = 0; i < r->nf; i++) {
                r->f[i].name = r->hdr_buf + r->hdr_off[i];
                r->f[i].name_len = r->hdr_len[i];
            }
        }
        *got = 1;
        return CHIMERA_OK;
    }
}

/* ---- schema ---------------------------------------------------------------------------- */

enum { SEEN_INT = 1, SEEN_REAL = 2, SEEN_TEXT = 4 };

typedef struct schema {
    meta_column cols[META_MAX_COLUMNS];
    unsigned seen[META_MAX_COLUMNS];
    int n, n_existing; /* columns [0, n_existing) are in the table already (upsert) */
} schema;

typedef struct id_line {
    int64_t id, line;
} id_line;

static int find_col(const schema *sc, const char *name, size_t len)
{
    for (int c = 0; c < sc->n; c++)
        if (strlen(sc->cols[c].name) == len && sqlite3_strnicmp(sc->cols[c].name, name, (int)len) == 0)
            return c;
    return -1;
}

static const char *kind_name(vkind k)
{
    switch (k) {
    case V_NULL: return "null";
    case V_INT: return "an integer";
    case V_REAL: return "a real number";
    case V_BOOL: return "a boolean";
    case V_TEXT: return "a string";
    case V_JSON: return "an array or object";
    }
    return "?";
}

static const char *type_name(meta_type t)
{
    return t == META_T_INTEGER ? "INTEGER" : t == META_T_REAL ? "REAL" : "TEXT";
}

/* Checks the current record against the schema (pass 1: adding columns, noting kinds;
 * pass 2: columns exist) and maps each field to its column (-1 for id) in col_of.
 * *id receives the record's id. */
static chimera_status map_record(reader *r, schema *sc, int pass1, int *col_of, int64_t *id,
                                 chimera_error *err)
{
    int id_field = -1;
    uint64_t used = 0;
    for (int i = 0; i < r->nf; i++) {
        const field *fl = &r->f[i];
        if (fl->name_len == 2 && memcmp(fl->name, "id", 2) == 0) {
            if (id_field >= 0) return rfail(r, err, "the field id appears twice");
            id_field = i;
            col_of[i] = -1;
            continue;
        }
        const char *why = meta_check_name(fl->name, fl->name_len);
        if (!why && fl->name_len == 2 && sqlite3_strnicmp(fl->name, "id", 2) == 0)
            why = "the same as id to SQLite, which ignores case";
        if (why) return rfail(r, err, "field name '%.*s': %s", (int)(fl->name_len > 64 ? 64 : fl->name_len), fl->name, why);
        int c = find_col(sc, fl->name, fl->name_len);
        if (c < 0) {
            if (!pass1) return rfail(r, err, "internal: column %.*s appeared in the second pass", (int)fl->name_len, fl->name);
            if (sc->n == META_MAX_COLUMNS)
                return rfail(r, err, "field '%.*s' would be column %d; at most %d are allowed",
                             (int)fl->name_len, fl->name, META_MAX_COLUMNS + 1, META_MAX_COLUMNS);
            c = sc->n++;
            memcpy(sc->cols[c].name, fl->name, fl->name_len);
            sc->cols[c].name[fl->name_len] = '\0';
            sc->cols[c].type = META_T_TEXT;
            sc->seen[c] = 0;
        }
        if (used & ((uint64_t)1 << c))
            return rfail(r, err, "field '%.*s' appears twice (names are compared ignoring case)",
                         (int)fl->name_len, fl->name);
        used |= (uint64_t)1 << c;
        col_of[i] = c;
        if (!pass1) continue;
        vkind k = fl->v.kind;
        if (c < sc->n_existing && sc->cols[c].type != META_T_TEXT && (k == V_TEXT || k == V_JSON))
            return rfail(r, err, "field '%s' is %s, but the column is %s (import the whole file again to change a column's type)",
                         sc->cols[c].name, kind_name(k), type_name(sc->cols[c].type));
        sc->seen[c] |= k == V_INT || k == V_BOOL ? SEEN_INT : k == V_REAL ? SEEN_REAL
                       : k == V_TEXT || k == V_JSON ? SEEN_TEXT : 0;
    }
    if (id_field < 0) return rfail(r, err, "no id field");
    const value *v = &r->f[id_field].v;
    if (v->kind == V_REAL && memchr(v->s, '.', v->len) == NULL && memchr(v->s, 'e', v->len) == NULL &&
        memchr(v->s, 'E', v->len) == NULL)
        return rfail(r, err, "id %.*s is out of range (0 .. 2^63-1)", (int)(v->len > 40 ? 40 : v->len), v->s);
    if (v->kind != V_INT) return rfail(r, err, "id is %s, not an integer", kind_name(v->kind));
    if (v->i < 0) return rfail(r, err, "id %lld is negative", (long long)v->i);
    *id = v->i;
    return CHIMERA_OK;
}

static int cmp_id_line(const void *a, const void *b)
{
    const id_line *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* ---- writing --------------------------------------------------------------------------- */

static chimera_status bind_value(sqlite3_stmt *st, int idx, meta_type t, const value *v)
{
    int rc;
    switch (v->kind) {
    case V_NULL: rc = sqlite3_bind_null(st, idx); break;
    case V_INT:
    case V_BOOL:
        if (t == META_T_TEXT) rc = sqlite3_bind_text(st, idx, v->s, (int)v->len, SQLITE_STATIC);
        else if (t == META_T_REAL) rc = sqlite3_bind_double(st, idx, (double)v->i);
        else rc = sqlite3_bind_int64(st, idx, v->i);
        break;
    case V_REAL:
        if (t == META_T_TEXT) rc = sqlite3_bind_text(st, idx, v->s, (int)v->len, SQLITE_STATIC);
        else rc = sqlite3_bind_double(st, idx, v->r);
        break;
    default: rc = sqlite3_bind_text(st, idx, v->s, (int)v->len, SQLITE_STATIC); break;
    }
    return rc == SQLITE_OK ? CHIMERA_OK : CHIMERA_ERR_INTERNAL;
}

/* Builds "CREATE TABLE meta(...)" or the ALTER TABLEs and the INSERT into a cm_malloc'd
 * string. Identifiers are quoted (the names are checked too; quoting is the rule). */
static char *build_sql(const schema *sc, meta_load_mode mode, int insert)
{
    size_t cap = 256 + (size_t)sc->n * (2 * META_MAX_NAME + 64);
    char *sql = cm_malloc(cap);
    if (!sql) return NULL;
    size_t k = 0;
    char q[2 * META_MAX_NAME + 3];
    sql[0] = '\0';
#define APPEND(...) k += (size_t)snprintf(sql + k, cap - k, __VA_ARGS__)
    if (insert) {
        APPEND("INSERT OR REPLACE INTO meta(id");
        for (int c = 0; c < sc->n; c++) {
            meta_quote_ident(sc->cols[c].name, q, sizeof q);
            APPEND(", %s", q);
        }
        APPEND(") VALUES(?");
        for (int c = 0; c < sc->n; c++) APPEND(", ?");
        APPEND(")");
    } else if (mode == META_LOAD_REPLACE) {
        APPEND("DROP TABLE meta; CREATE TABLE meta(id INTEGER PRIMARY KEY");
        for (int c = 0; c < sc->n; c++) {
            meta_quote_ident(sc->cols[c].name, q, sizeof q);
            APPEND(", %s %s", q, type_name(sc->cols[c].type));
        }
        APPEND(");");
    } else {
        for (int c = sc->n_existing; c < sc->n; c++) {
            meta_quote_ident(sc->cols[c].name, q, sizeof q);
            APPEND("ALTER TABLE meta ADD COLUMN %s %s;", q, type_name(sc->cols[c].type));
        }
    }
#undef APPEND
    return sql;
}

/* Pass 2: the table change and the inserts (inside the caller's savepoint). */
static chimera_status write_records(meta_db *db, reader *r, schema *sc, meta_load_mode mode,
                                    int *col_of, int64_t *n_written, chimera_error *err)
{
    *n_written = 0;
    char *ddl = build_sql(sc, mode, 0);
    char *ins = ddl ? build_sql(sc, mode, 1) : NULL;
    sqlite3_stmt *st = NULL;
    chimera_status s = CHIMERA_OK;
    if (!ddl || !ins) s = cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    if (s == CHIMERA_OK && ddl[0]) s = meta_exec(db->conn, ddl, "changing the table", err);
    if (s == CHIMERA_OK) {
        int rc = sqlite3_prepare_v2(db->conn, ins, -1, &st, NULL);
        if (rc != SQLITE_OK) s = meta_sqlite_fail(err, db->conn, rc, "preparing the insert");
    }
    if (s == CHIMERA_OK) s = reader_start(r, err);
    while (s == CHIMERA_OK) {
        int got = 0;
        int64_t id = 0;
        s = reader_next(r, &got, err);
        if (s != CHIMERA_OK || !got) break;
        s = map_record(r, sc, 0, col_of, &id, err);
        if (s != CHIMERA_OK) break;
        sqlite3_clear_bindings(st);
        sqlite3_bind_int64(st, 1, id);
        for (int i = 0; i < r->nf && s == CHIMERA_OK; i++) {
            int c = col_of[i];
            if (c < 0) continue;
            if (bind_value(st, c + 2, sc->cols[c].type, &r->f[i].v) != CHIMERA_OK)
                s = meta_sqlite_fail(err, db->conn, sqlite3_errcode(db->conn), "binding a value");
        }
        if (s != CHIMERA_OK) break;
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE) {
            s = meta_sqlite_fail(err, db->conn, rc, "inserting");
            cm_fail_prefix(err, "%s:%lld", r->source, (long long)r->line);
            break;
        }
        sqlite3_reset(st);
        (*n_written)++;
    }
    sqlite3_finalize(st);
    cm_free(ddl);
    cm_free(ins);
    return s;
}

/* ---- entry points ------------------------------------------------------------------- */

chimera_status meta_load_text(meta_db *db, meta_input_format fmt, meta_load_mode mode,
                              const char *text, size_t len, const char *source,
                              meta_load_info *info, chimera_error *err)
{
    if (info) memset(info, 0, sizeof *info);
    if (!db || (!text && len) || (fmt != META_INPUT_JSONL && fmt != META_INPUT_CSV) ||
        (mode != META_LOAD_REPLACE && mode != META_LOAD_UPSERT))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "meta_load_text: bad arguments");
    if (!source) source = fmt == META_INPUT_CSV ? "<csv>" : "<jsonl>";
    if (!text) text = "";
    schema *sc = cm_calloc(1, sizeof *sc);
    int *col_of = cm_malloc(META_MAX_FIELDS * sizeof *col_of);
    id_line *ids = NULL;
    int64_t n_ids = 0, cap_ids = 0;
    reader r;
    reader_init(&r, fmt, text, len, source);
    chimera_status s = CHIMERA_OK;
    int in_sp = 0;
    if (!sc || !col_of) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (mode == META_LOAD_UPSERT) {
        s = meta_read_columns(db->conn, sc->cols, &sc->n, err);
        if (s != CHIMERA_OK) goto done;
        sc->n_existing = sc->n;
    }
    /* pass 1: check everything, learn the columns */
    s = reader_start(&r, err);
    while (s == CHIMERA_OK) {
        int got = 0;
        int64_t id = 0;
        s = reader_next(&r, &got, err);
        if (s != CHIMERA_OK || !got) break;
        s = map_record(&r, sc, 1, col_of, &id, err);
        if (s != CHIMERA_OK) break;
        if (n_ids == cap_ids) {
            int64_t nc = cap_ids ? 2 * cap_ids : 1024;
            id_line *ni = cm_realloc(ids, (size_t)nc * sizeof *ni);
            if (!ni) {
                s = cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
                break;
            }
            ids = ni;
            cap_ids = nc;
        }
        ids[n_ids].id = id;
        ids[n_ids].line = r.line;
        n_ids++;
    }
    if (s != CHIMERA_OK) goto done;
    if (n_ids == 0 && mode == META_LOAD_REPLACE) {
        s = cm_fail(err, CHIMERA_ERR_FORMAT,
                    "%s: no records (an import replaces all metadata; an empty one would erase it)", source);
        goto done;
    }
    if (n_ids > 1) qsort(ids, (size_t)n_ids, sizeof *ids, cmp_id_line);
    for (int64_t i = 1; i < n_ids; i++) {
        if (ids[i].id != ids[i - 1].id) continue;
        /* report the later of the first duplicate pair in file order */
        int64_t worst = -1, first = 0, dup = 0;
        for (int64_t k = 1; k < n_ids; k++)
            if (ids[k].id == ids[k - 1].id && (worst < 0 || ids[k].line < worst)) {
                worst = ids[k].line;
                first = ids[k - 1].line;
                dup = ids[k].id;
            }
        s = cm_fail(err, CHIMERA_ERR_FORMAT, "%s:%lld: duplicate id %lld (first on line %lld)", source,
                    (long long)worst, (long long)dup, (long long)first);
        goto done;
    }
    for (int c = sc->n_existing; c < sc->n; c++) {
        unsigned k = sc->seen[c];
        sc->cols[c].type = k & SEEN_TEXT ? META_T_TEXT : k & SEEN_REAL ? META_T_REAL
                           : k & SEEN_INT ? META_T_INTEGER : META_T_TEXT;
    }
    /* pass 2: write */
    s = meta_savepoint_begin(db, err);
    if (s != CHIMERA_OK) goto done;
    in_sp = 1;
    int64_t written = 0;
    reader_free(&r);
    reader_init(&r, fmt, text, len, source);
    s = write_records(db, &r, sc, mode, col_of, &written, err);
    if (s == CHIMERA_OK && written != n_ids)
        s = cm_fail(err, CHIMERA_ERR_INTERNAL, "%s: %lld records on the second reading, %lld on the first",
                    source, (long long)written, (long long)n_ids);
    if (s == CHIMERA_OK) s = meta_savepoint_release(db, err);
    if (s == CHIMERA_OK) {
        in_sp = 0;
        if (info) {
            info->n_records = n_ids;
            info->n_columns = sc->n;
            info->n_new_columns = sc->n - sc->n_existing;
        }
    }
done:
    if (in_sp) meta_savepoint_undo(db);
    reader_free(&r);
    cm_free(ids);
    cm_free(col_of);
    cm_free(sc);
    return s;
}

chimera_status meta_load_file(meta_db *db, meta_input_format fmt, meta_load_mode mode,
                              const char *path, meta_load_info *info, chimera_error *err)
{
    if (info) memset(info, 0, sizeof *info);
    if (!path) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "meta_load_file: no path");
    FILE *f = fopen(path, "rb");
    if (!f) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot read (not a regular file?)", path);
    }
    char *text = cm_malloc((size_t)size + 1);
    if (!text) {
        fclose(f);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory (%ld bytes)", path, size);
    }
    if (fread(text, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        cm_free(text);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot read", path);
    }
    fclose(f);
    chimera_status s = meta_load_text(db, fmt, mode, text, (size_t)size, path, info, err);
    cm_free(text);
    return s;
}

chimera_status meta_import_jsonl(meta_db *db, const char *path, meta_load_info *info,
                                 chimera_error *err)
{
    return meta_load_file(db, META_INPUT_JSONL, META_LOAD_REPLACE, path, info, err);
}

chimera_status meta_import_csv(meta_db *db, const char *path, meta_load_info *info,
                               chimera_error *err)
{
    return meta_load_file(db, META_INPUT_CSV, META_LOAD_REPLACE, path, info, err);
}

chimera_status meta_db_upsert_jsonl_records(meta_db *db, const char *text, size_t len,
                                            const char *source, meta_load_info *info,
                                            chimera_error *err)
{
    return meta_load_text(db, META_INPUT_JSONL, META_LOAD_UPSERT, text, len, source, info, err);
}
