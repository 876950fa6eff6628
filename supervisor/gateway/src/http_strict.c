/* HTTP/1.1 strictness stated by the gateway itself, whatever libmicrohttpd already
 * refuses: where a proxy in front and this server could disagree on where a request ends
 * (RFC 9112 section 11.2, request smuggling), the request is refused and the connection
 * closed. Content-Length and Transfer-Encoding together are refused (RFC 9112 section
 * 6.3 lets a server either refuse or let chunked win; refusing leaves nothing to disagree
 * on), and so are repeated Content-Length fields even with equal values. The only
 * transfer coding is chunked. */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "http_strict.h"

static bool is_hex(unsigned char c) {
        return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

bool dsv__gw_strict_target_ok(const char *raw_target) {
        if (!raw_target || !raw_target[0])
                return false;
        for (const unsigned char *p = (const unsigned char *)raw_target; *p; p++) {
                if (*p <= 0x20 || *p == 0x7f)
                        return false;
                if (*p == '%') {
                        if (!is_hex(p[1]) || !is_hex(p[2]) || (p[1] == '0' && p[2] == '0'))
                                return false;
                        p += 2;
                }
        }
        return true;
}

/* RFC 9110 section 5.6.2: token = 1*tchar. */
static bool is_tchar(unsigned char c) {
        return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A field value: visible characters, obs-text, spaces and tabs; no NUL, CR, LF or other
 * control character (RFC 9110 section 5.5). */
static bool value_ok(const char *v, size_t len) {
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)v[i];
                if ((c < 0x20 && c != '\t') || c == 0x7f)
                        return false;
        }
        return true;
}

/* RFC 9112 section 3.2 with RFC 3986's host and port: reg-name, IPv4 or an IP literal
 * in brackets, then an optional port; empty is allowed. */
static bool host_ok(const char *v, size_t len) {
        size_t i = 0;
        if (len && v[0] == '[') {
                while (i < len && v[i] != ']')
                        i++;
                if (i == len)
                        return false;
                for (size_t k = 1; k < i; k++)
                        if (!is_hex((unsigned char)v[k]) && v[k] != ':' && v[k] != '.')
                                return false;
                i++;
        } else {
                for (; i < len && v[i] != ':'; i++) {
                        unsigned char c = (unsigned char)v[i];
                        if (c == '%') {
                                if (i + 2 >= len || !is_hex((unsigned char)v[i + 1]) || !is_hex((unsigned char)v[i + 2]))
                                        return false;
                        } else if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
                                     strchr("-._~!$&'()*+,;=", c))) {
                                return false;
                        }
                }
        }
        if (i == len)
                return true;
        if (v[i] != ':')
                return false;
        for (i++; i < len; i++)
                if (v[i] < '0' || v[i] > '9')
                        return false;
        return true;
}

/* Content-Length = 1*DIGIT, within 19 digits (no overflow of uint64). */
static bool content_length_ok(const char *v, size_t len) {
        if (len == 0 || len > 19)
                return false;
        for (size_t i = 0; i < len; i++)
                if (v[i] < '0' || v[i] > '9')
                        return false;
        return true;
}

enum coding_verdict { CODING_OK, CODING_BAD, CODING_UNKNOWN };

/* Transfer-Encoding: a comma-separated list of codings, each perhaps with parameters.
 * Only chunked is known, and it must be the last and only once (RFC 9112 sections 6.1,
 * 7); an unknown coding is reported as such so it can be answered 501. */
static enum coding_verdict coding_check(const char *v, size_t len) {
        int chunked = 0, unknown = 0, n = 0;
        bool chunked_last = false;
        size_t i = 0;
        while (i <= len) {
                size_t start = i;
                while (i < len && v[i] != ',')
                        i++;
                size_t end = i++;
                while (start < end && (v[start] == ' ' || v[start] == '\t'))
                        start++;
                size_t name_end = start;
                while (name_end < end && is_tchar((unsigned char)v[name_end]))
                        name_end++;
                size_t rest = name_end;
                while (rest < end && (v[rest] == ' ' || v[rest] == '\t'))
                        rest++;
                if (name_end == start)
                        return CODING_BAD; /* an empty list element or no token */
                if (rest < end && v[rest] != ';')
                        return CODING_BAD;
                bool is_chunked = name_end - start == 7 && strncasecmp(v + start, "chunked", 7) == 0;
                if (is_chunked && rest < end)
                        return CODING_BAD; /* chunked takes no parameters */
                chunked += is_chunked;
                unknown += !is_chunked;
                chunked_last = is_chunked;
                n++;
        }
        if (unknown)
                return CODING_UNKNOWN;
        return n == 1 && chunked == 1 && chunked_last ? CODING_OK : CODING_BAD;
}

struct field_scan {
        int content_length, transfer_encoding, host;
        bool host_bad, cl_bad, name_bad, value_bad;
        enum coding_verdict coding;
        char bad_name[48];
};

static enum MHD_Result scan_field(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                  const char *value, size_t value_size) {
        struct field_scan *s = cls;
        (void)kind;
        bool name_ok = key && key_size > 0;
        for (size_t i = 0; name_ok && i < key_size; i++)
                name_ok = is_tchar((unsigned char)key[i]);
        if (!name_ok) {
                s->name_bad = true;
                return MHD_NO;
        }
        if (!value && value_size)
                value_size = 0;
        if (!value_ok(value, value_size)) {
                s->value_bad = true;
                snprintf(s->bad_name, sizeof s->bad_name, "%.*s", (int)key_size, key);
                return MHD_NO;
        }
        if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
                s->content_length++;
                s->cl_bad |= !content_length_ok(value, value_size);
        } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
                s->transfer_encoding++;
                s->coding = coding_check(value, value_size);
        } else if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) {
                s->host++;
                s->host_bad |= !host_ok(value, value_size);
        }
        return MHD_YES;
}

static int refuse(struct dsv_gw_error *e, int status, const char *what) {
        dsv__gw_error_set(e, status, "invalid_request_error", status == 501 ? "not_implemented" : "invalid_request",
                          NULL, "%s", what);
        return -EPROTO;
}

bool dsv__gw_strict_header_block(const char *buf, size_t n) {
        /* field lines start after the request line and end at the first empty line (the
         * body after it is not looked at); a line may end in LF alone, as the accept path
         * allows (libmicrohttpd then refuses it) */
        const char *end = buf + n, *p = memchr(buf, '\n', n), *block_end = end;
        while (p && ++p < end) {
                if (*p == '\n' || (*p == '\r' && p + 1 < end && p[1] == '\n')) {
                        block_end = p;
                        break;
                }
                if (*p == ':')
                        return false;
                p = memchr(p, '\n', (size_t)(end - p));
        }
        return memchr(buf, 0, (size_t)(block_end - buf)) == NULL;
}

int dsv__gw_strict_request(struct MHD_Connection *conn, const char *version, bool target_ok, struct dsv_gw_error *e) {
        if (!target_ok)
                return refuse(e, 400, "The request target holds a control character, a space or an escaped NUL");
        bool http11 = version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0;
        if (!http11 && !(version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0))
                return refuse(e, 400, "Only HTTP/1.0 and HTTP/1.1 are served");
        struct field_scan s = {.coding = CODING_OK};
        MHD_get_connection_values_n(conn, MHD_HEADER_KIND, scan_field, &s);
        if (s.name_bad)
                return refuse(e, 400, "A header field name is not a token");
        if (s.value_bad) {
                dsv__gw_error_set(e, 400, "invalid_request_error", "invalid_request", NULL,
                                  "The header field '%s' holds a control character", s.bad_name);
                return -EPROTO;
        }
        if (s.host > 1 || (http11 && s.host == 0))
                return refuse(e, 400, "An HTTP/1.1 request needs exactly one Host header field");
        if (s.host_bad)
                return refuse(e, 400, "The Host header field is not a valid host");
        if (s.content_length > 1 || s.cl_bad)
                return refuse(e, 400, "Content-Length must be given once, as a decimal number");
        if (s.transfer_encoding && !http11)
                return refuse(e, 400, "Transfer-Encoding is not allowed in HTTP/1.0");
        if (s.transfer_encoding > 1)
                return refuse(e, 400, "Transfer-Encoding must be given once");
        if (s.transfer_encoding && s.content_length)
                return refuse(e, 400, "Content-Length and Transfer-Encoding must not both be given");
        if (s.coding == CODING_UNKNOWN)
                return refuse(e, 501, "The only transfer coding served is chunked");
        if (s.coding == CODING_BAD)
                return refuse(e, 400, "Transfer-Encoding must be exactly chunked");
        return 0;
}
