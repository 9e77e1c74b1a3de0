/* Section header encoding and the small validators of the container format (format.h
 * has the byte table). Encoding is byte by byte so the layout never depends on the
 * compiler's struct padding or the host's byte order. */
#include <string.h>

#include <xxhash.h>

#include "index/format.h"

int ix_fmt_host_little_endian(void)
{
    const uint32_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static uint32_t header_check(const uint8_t *h)
{
    return (uint32_t)XXH3_64bits(h, FMT_HEADER_BYTES - 4);
}

void ix_fmt_header_encode(uint8_t out[FMT_HEADER_BYTES], const char *name, uint16_t major,
                          uint16_t minor, uint64_t payload_bytes, uint64_t payload_xxh3)
{
    memset(out, 0, FMT_HEADER_BYTES);
    memcpy(out, FMT_SECTION_MAGIC, 8); /* includes the terminating NUL */
    ix_fmt_put_u16(out + 8, major);
    ix_fmt_put_u16(out + 10, minor);
    const uint32_t mark = FMT_ENDIAN_MARK; /* native order, on purpose */
    memcpy(out + 12, &mark, 4);
    ix_fmt_put_u64(out + 16, payload_bytes);
    ix_fmt_put_u64(out + 24, payload_xxh3);
    size_t n = strlen(name);
    if (n > FMT_NAME_MAX) n = FMT_NAME_MAX;
    memcpy(out + 32, name, n);
    ix_fmt_put_u32(out + 56, 0);
    ix_fmt_put_u32(out + 60, header_check(out));
}

void ix_fmt_header_decode(const uint8_t in[FMT_HEADER_BYTES], ix_fmt_section_header *h)
{
    memset(h, 0, sizeof *h);
    h->magic_ok = memcmp(in, FMT_SECTION_MAGIC, 8) == 0;
    h->format_major = ix_fmt_get_u16(in + 8);
    h->format_minor = ix_fmt_get_u16(in + 10);
    h->endian_mark = ix_fmt_get_u32(in + 12);
    h->payload_bytes = ix_fmt_get_u64(in + 16);
    h->payload_xxh3 = ix_fmt_get_u64(in + 24);
    memcpy(h->name, in + 32, FMT_NAME_BYTES);
    /* well formed: a valid name, then only NULs to the end of the field */
    size_t n = 0;
    while (n < FMT_NAME_BYTES && in[32 + n] != 0) n++;
    int pad_ok = n < FMT_NAME_BYTES;
    for (size_t i = n; i < FMT_NAME_BYTES; i++) pad_ok &= in[32 + i] == 0;
    h->name[FMT_NAME_BYTES - 1] = '\0';
    h->name_ok = pad_ok && ix_fmt_name_valid(h->name);
    h->reserved = ix_fmt_get_u32(in + 56);
    h->header_check = ix_fmt_get_u32(in + 60);
    h->header_check_calc = header_check(in);
}

static int is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int ix_fmt_name_valid(const char *name)
{
    if (!name || !is_alnum(name[0])) return 0;
    size_t n = 0;
    for (; name[n]; n++) {
        if (n >= FMT_NAME_MAX) return 0;
        char c = name[n];
        if (!is_alnum(c) && c != '_' && c != '-') return 0;
    }
    return n >= 1;
}

size_t ix_fmt_dtype_size(const char *dtype)
{
    static const struct {
        const char *name;
        size_t size;
    } types[] = {{"u8", 1},  {"i8", 1},  {"u16", 2}, {"i16", 2}, {"f16", 2}, {"bf16", 2},
                 {"u32", 4}, {"i32", 4}, {"f32", 4}, {"u64", 8}, {"i64", 8}, {"f64", 8}};
    if (!dtype) return 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dtype, types[i].name) == 0) return types[i].size;
    return 0;
}

void ix_fmt_hex_format(char out[17], uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        out[i] = digits[v & 15];
        v >>= 4;
    }
    out[16] = '\0';
}

int ix_fmt_hex_parse(const char *s, uint64_t *v)
{
    uint64_t x = 0;
    if (!s) return -1;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else return -1;
        x = (x << 4) | d;
    }
    if (s[16] != '\0') return -1;
    *v = x;
    return 0;
}
