/* The strict pass over a request body before cJSON reads it: cJSON accepts what RFC 8259
 * does not (raw control characters in strings, bytes after the value) and reads some of
 * it differently from other parsers (a duplicate key: cJSON finds the first, many find
 * the last; "\u0000": cJSON's strings end there). A body two readers could see two ways
 * is refused, so the fields checked here are the fields the worker gets. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "openai.h"

#define MAX_DEPTH 64     /* arrays and objects inside each other */
#define MAX_KEY_BYTES 256 /* an object key, decoded */

/* One key of an object still open: bytes [at, at + len) of keys.text. */
struct key_ref {
        size_t at, len;
};

struct json_scan {
        const char *s;
        size_t len, pos;
        struct dsv_gw_error *e;
        /* The keys of every open object, innermost last, decoded, for duplicate checks. */
        struct key_ref *keys;
        size_t n_keys, cap_keys;
        char *text;
        size_t text_len, text_cap;
};

static int fail(struct json_scan *j, const char *what) {
        dsv__gw_error_set(j->e, 400, "invalid_request_error", "invalid_request", NULL,
                          "the request body is not valid JSON: %s at byte %zu", what, j->pos);
        return -EINVAL;
}

static void skip_ws(struct json_scan *j) {
        while (j->pos < j->len &&
               (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' || j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
                j->pos++;
}

static int hex4(struct json_scan *j, unsigned *out) {
        if (j->len - j->pos < 4)
                return fail(j, "a short \\u escape");
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
                char c = j->s[j->pos++];
                unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                             : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (unsigned)((c | 0x20) - 'a' + 10)
                                                                      : 16;
                if (d == 16)
                        return fail(j, "a bad \\u escape");
                v = v << 4 | d;
        }
        *out = v;
        return 0;
}

static int put(struct json_scan *j, const char *bytes, size_t n) {
        if (j->text_len + n > j->text_cap) {
                size_t cap = j->text_cap ? j->text_cap * 2 : 1024;
                while (cap < j->text_len + n)
                        cap *= 2;
                char *t = realloc(j->text, cap);
                if (!t)
                        return -ENOMEM;
                j->text = t;
                j->text_cap = cap;
        }
        memcpy(j->text + j->text_len, bytes, n);
        j->text_len += n;
        return 0;
}

/* A string at j->pos (the opening quote). With key set, its decoded bytes are appended
 * to j->text (at most MAX_KEY_BYTES). The body's UTF-8 was checked before. */
static int scan_string(struct json_scan *j, bool key) {
        j->pos++;
        size_t decoded = 0;
        for (;;) {
                if (j->pos >= j->len)
                        return fail(j, "an unterminated string");
                unsigned char c = (unsigned char)j->s[j->pos];
                char utf8[4];
                size_t n = 1;
                utf8[0] = (char)c;
                if (c == '"') {
                        j->pos++;
                        return 0;
                }
                if (c < 0x20)
                        return fail(j, "a raw control character in a string");
                if (c == '\\') {
                        if (++j->pos >= j->len)
                                return fail(j, "an unterminated string");
                        char x = j->s[j->pos++];
                        const char *simple = strchr("\"\\/bfnrt", x);
                        if (x && simple) {
                                utf8[0] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
                        } else if (x == 'u') {
                                unsigned cp;
                                int r = hex4(j, &cp);
                                if (r < 0)
                                        return r;
                                if (cp >= 0xdc00 && cp <= 0xdfff)
                                        return fail(j, "a lone low surrogate");
                                if (cp >= 0xd800 && cp <= 0xdbff) {
                                        unsigned lo;
                                        if (j->len - j->pos < 2 || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u')
                                                return fail(j, "a lone high surrogate");
                                        j->pos += 2;
                                        if ((r = hex4(j, &lo)) < 0)
                                                return r;
                                        if (lo < 0xdc00 || lo > 0xdfff)
                                                return fail(j, "a lone high surrogate");
                                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                                }
                                if (cp == 0)
                                        return fail(j, "an escaped NUL in a string");
                                if (cp < 0x80) {
                                        utf8[0] = (char)cp;
                                } else if (cp < 0x800) {
                                        utf8[0] = (char)(0xc0 | cp >> 6), utf8[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
                                } else if (cp < 0x10000) {
                                        utf8[0] = (char)(0xe0 | cp >> 12), utf8[1] = (char)(0x80 | (cp >> 6 & 0x3f));
                                        utf8[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
                                } else {
                                        utf8[0] = (char)(0xf0 | cp >> 18), utf8[1] = (char)(0x80 | (cp >> 12 & 0x3f));
                                        utf8[2] = (char)(0x80 | (cp >> 6 & 0x3f)), utf8[3] = (char)(0x80 | (cp & 0x3f));
                                        n = 4;
                                }
                        } else {
                                return fail(j, "a bad escape in a string");
                        }
                } else {
                        j->pos++;
                }
                if (key) {
                        decoded += n;
                        if (decoded > MAX_KEY_BYTES)
                                return fail(j, "a key longer than 256 bytes");
                        int r = put(j, utf8, n);
                        if (r < 0)
                                return r;
                }
        }
}

static bool digit(const struct json_scan *j) {
        return j->pos < j->len && j->s[j->pos] >= '0' && j->s[j->pos] <= '9';
}

/* number = [ minus ] int [ frac ] [ exp ] (RFC 8259 section 6). */
static int scan_number(struct json_scan *j) {
        if (j->s[j->pos] == '-')
                j->pos++;
        if (!digit(j))
                return fail(j, "a malformed number");
        if (j->s[j->pos++] != '0')
                while (digit(j))
                        j->pos++;
        else if (digit(j))
                return fail(j, "a number with a leading zero");
        if (j->pos < j->len && j->s[j->pos] == '.') {
                j->pos++;
                if (!digit(j))
                        return fail(j, "a malformed number");
                while (digit(j))
                        j->pos++;
        }
        if (j->pos < j->len && (j->s[j->pos] == 'e' || j->s[j->pos] == 'E')) {
                j->pos++;
                if (j->pos < j->len && (j->s[j->pos] == '+' || j->s[j->pos] == '-'))
                        j->pos++;
                if (!digit(j))
                        return fail(j, "a malformed number");
                while (digit(j))
                        j->pos++;
        }
        return 0;
}

static int key_order(const void *a, const void *b, void *text) {
        const struct key_ref *x = a, *y = b;
        int c = memcmp((const char *)text + x->at, (const char *)text + y->at, x->len < y->len ? x->len : y->len);
        return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The longest prefix of text[0..len) of at most max bytes that does not cut a UTF-8
 * sequence, so an error naming a key stays valid UTF-8. */
static int utf8_prefix(const char *text, size_t len, size_t max) {
        if (len <= max)
                return (int)len;
        while (max > 0 && ((unsigned char)text[max] & 0xc0) == 0x80)
                max--;
        return (int)max;
}

/* The keys of the object just closed, j->keys[first..]: refused when two are equal; then
 * forgotten. */
static int check_keys(struct json_scan *j, size_t first) {
        struct key_ref *k = j->keys + first;
        size_t n = j->n_keys - first;
        char *text = j->text ? j->text : ""; /* empty keys alone allocate no text */
        qsort_r(k, n, sizeof *k, key_order, text);
        for (size_t i = 1; i < n; i++) {
                if (key_order(&k[i - 1], &k[i], text) == 0) {
                        const char *key = text + k[i].at;
                        dsv__gw_error_set(j->e, 400, "invalid_request_error", "invalid_request", NULL,
                                          "the request body is not valid JSON: the key '%.*s' appears twice in an "
                                          "object",
                                          utf8_prefix(key, k[i].len, 64), key);
                        snprintf(j->e->param, sizeof j->e->param, "%.*s",
                                 utf8_prefix(key, k[i].len, sizeof j->e->param - 1), key);
                        return -EINVAL;
                }
        }
        j->n_keys = first;
        return 0;
}

static int scan_value(struct json_scan *j, int depth);

/* After a member of an array or object: 1 at a ',' (another one follows), 0 at close (the
 * container ends), else the error what. */
static int next_member(struct json_scan *j, char close, const char *what) {
        skip_ws(j);
        if (j->pos < j->len && (j->s[j->pos] == ',' || j->s[j->pos] == close))
                return j->s[j->pos++] == ',';
        return fail(j, what);
}

static int scan_object(struct json_scan *j, int depth) {
        size_t first = j->n_keys, text_mark = j->text_len;
        j->pos++;
        skip_ws(j);
        if (j->pos < j->len && j->s[j->pos] == '}') {
                j->pos++;
                return 0;
        }
        for (;;) {
                skip_ws(j);
                if (j->pos >= j->len || j->s[j->pos] != '"')
                        return fail(j, "an object key that is not a string");
                if (j->n_keys == j->cap_keys) {
                        size_t cap = j->cap_keys ? j->cap_keys * 2 : 64;
                        struct key_ref *k = realloc(j->keys, cap * sizeof *k);
                        if (!k)
                                return -ENOMEM;
                        j->keys = k;
                        j->cap_keys = cap;
                }
                size_t at = j->text_len;
                int r = scan_string(j, true);
                if (r < 0)
                        return r;
                j->keys[j->n_keys++] = (struct key_ref){at, j->text_len - at};
                skip_ws(j);
                if (j->pos >= j->len || j->s[j->pos] != ':')
                        return fail(j, "a missing ':' in an object");
                j->pos++;
                if ((r = scan_value(j, depth)) < 0 || (r = next_member(j, '}', "a missing ',' or '}' in an object")) < 0)
                        return r;
                if (r == 0) {
                        r = check_keys(j, first);
                        j->text_len = text_mark;
                        return r;
                }
        }
}

static int scan_array(struct json_scan *j, int depth) {
        j->pos++;
        skip_ws(j);
        if (j->pos < j->len && j->s[j->pos] == ']') {
                j->pos++;
                return 0;
        }
        for (;;) {
                int r = scan_value(j, depth);
                if (r < 0 || (r = next_member(j, ']', "a missing ',' or ']' in an array")) <= 0)
                        return r;
        }
}

static int literal(struct json_scan *j, const char *word) {
        size_t n = strlen(word);
        if (j->len - j->pos < n || memcmp(j->s + j->pos, word, n) != 0)
                return fail(j, "an unexpected character");
        j->pos += n;
        return 0;
}

static int scan_value(struct json_scan *j, int depth) {
        skip_ws(j);
        if (j->pos >= j->len)
                return fail(j, "a missing value");
        switch (j->s[j->pos]) {
        case '{':
        case '[':
                if (depth >= MAX_DEPTH)
                        return fail(j, "nesting deeper than 64 levels");
                return j->s[j->pos] == '{' ? scan_object(j, depth + 1) : scan_array(j, depth + 1);
        case '"':
                return scan_string(j, false);
        case 't':
                return literal(j, "true");
        case 'f':
                return literal(j, "false");
        case 'n':
                return literal(j, "null");
        default:
                if (j->s[j->pos] == '-' || (j->s[j->pos] >= '0' && j->s[j->pos] <= '9'))
                        return scan_number(j);
                return fail(j, "an unexpected character");
        }
}

int dsv__gw_json_strict(const char *body, size_t len, struct dsv_gw_error *err) {
        struct json_scan j = {.s = body ? body : "", .len = body ? len : 0, .e = err};
        int r = scan_value(&j, 0);
        if (r == 0) {
                skip_ws(&j);
                if (j.pos < j.len)
                        r = fail(&j, "bytes after the value");
        }
        if (r == -ENOMEM)
                dsv__gw_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        free(j.keys);
        free(j.text);
        return r;
}
