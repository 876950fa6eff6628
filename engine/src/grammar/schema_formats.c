/* JSON Schema `format` values the compiler enforces, each as a regex over the string's
 * content (regex_compile.c). Each accepts only values valid under its RFC, and where
 * the RFC's full definition is not expressible here (a total length bound across
 * labels) or where the validators in use are stricter than the RFC (Python's date
 * rejects year 0, WHATWG URL parsers reject ports over 65535 and numeric last host
 * labels), a subset: README.md states each one. A format not listed is refused by the
 * caller when it is a known one, ignored when unknown (validators ignore those). */
#include <errno.h>
#include <string.h>

#include "grammar/regex.h"
#include "grammar/schema.h"

#define DIGIT "[0-9]"
/* RFC 3339 date-fullyear 0001-9999, and its leap years (divisible by 4, centuries by 400) */
#define YEAR "(" DIGIT "{3}[1-9]|" DIGIT "{2}[1-9]" DIGIT "|" DIGIT "[1-9]" DIGIT "{2}|[1-9]" DIGIT "{3})"
#define LEAP_YEAR "(" DIGIT "{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
/* RFC 3339 full-date with the days of each month (section 5.7) */
#define DATE                                                                                  \
        "(" YEAR "-(0[13578]|1[02])-(0[1-9]|[12]" DIGIT "|3[01])|" YEAR "-(0[469]|11)-(0[1-9]|[12]" DIGIT \
        "|30)|" YEAR "-02-(0[1-9]|1" DIGIT "|2[0-8])|" LEAP_YEAR "-02-29)"
/* RFC 3339 full-time, without the leap second 60 and with upper-case Z only */
#define TIME                                                                                              \
        "([01]" DIGIT "|2[0-3]):[0-5]" DIGIT ":[0-5]" DIGIT "(\\." DIGIT "+)?(Z|[+-]([01]" DIGIT "|2[0-3]):[0-5]" DIGIT \
        ")"
#define HEX "[0-9A-Fa-f]"
#define DEC_OCTET "(25[0-5]|2[0-4]" DIGIT "|1" DIGIT "{2}|[1-9]" DIGIT "|" DIGIT ")"
#define IPV4 DEC_OCTET "(\\." DEC_OCTET "){3}"
#define H16 HEX "{1,4}"
#define LS32 "(" H16 ":" H16 "|" IPV4 ")"
/* RFC 4291 section 2.2 text forms, as RFC 3986's IPv6address writes them */
#define IPV6                                                                                                  \
        "((" H16 ":){6}" LS32 "|::(" H16 ":){5}" LS32 "|(" H16 ")?::(" H16 ":){4}" LS32 "|((" H16 ":){0,1}" H16 \
        ")?::(" H16 ":){3}" LS32 "|((" H16 ":){0,2}" H16 ")?::(" H16 ":){2}" LS32 "|((" H16 ":){0,3}" H16       \
        ")?::" H16 ":" LS32 "|((" H16 ":){0,4}" H16 ")?::" LS32 "|((" H16 ":){0,5}" H16 ")?::" H16 "|((" H16    \
        ":){0,6}" H16 ")?::)"
/* RFC 1123 host names: labels of letters, digits and inner hyphens, at most 63
 * characters; the last label starts with a letter (so it is never all digits). The
 * 253-character total is kept by construction: up to four labels with a last one of at
 * most 61, or five to eight labels of at most 30 each. */
#define LDH "[A-Za-z0-9-]"
#define LABEL(n) "[A-Za-z0-9](" LDH "{0," #n "}[A-Za-z0-9])?"
#define LAST_LABEL(n) "[A-Za-z](" LDH "{0," #n "}[A-Za-z0-9])?"
#define HOSTNAME "((" LABEL(61) "\\.){0,3}" LAST_LABEL(59) "|(" LABEL(28) "\\.){4,7}" LAST_LABEL(28) ")"
/* RFC 5321 Mailbox with a Dot-string local part (atext runs joined by single dots) of
 * at most 64 characters, kept by construction, and a host name as the domain */
#define ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
#define LOCAL_PART                                                                                            \
        "(" ATEXT "{1,64}|" ATEXT "{1,31}\\." ATEXT "{1,32}|" ATEXT "{1,20}(\\." ATEXT "{1,20}){2}|" ATEXT "{1,12}(\\." \
        ATEXT "{1,12}){3,4})"
/* RFC 3986 URI (section 3) without IPvFuture; the host an IPv6 literal, an IPv4
 * address or a dotted name whose last label starts with a letter; a port of at most
 * 65535 */
#define PCT "%" HEX "{2}"
#define PCHAR "([A-Za-z0-9._~!$&'()*+,;=:@-]|" PCT ")"
#define URI_HOST "(\\[" IPV6 "\\]|" IPV4 "|([A-Za-z0-9_~-]+\\.)*[A-Za-z][A-Za-z0-9_~-]*)"
#define URI_PORT "(" DIGIT "{0,4}|[1-5]" DIGIT "{4}|6[0-4]" DIGIT "{3}|65[0-4]" DIGIT "{2}|655[0-2]" DIGIT "|6553[0-5])"
#define AUTHORITY "(([A-Za-z0-9._~!$&'()*+,;=:-]|" PCT ")*@)?" URI_HOST "(:" URI_PORT ")?"
#define HIER_PART "(//" AUTHORITY "(/" PCHAR "*)*|/(" PCHAR "+(/" PCHAR "*)*)?|" PCHAR "+(/" PCHAR "*)*|)"
#define QUERY "(" PCHAR "|[/?])*"
#define URI "[A-Za-z][A-Za-z0-9+.-]*:" HIER_PART "(\\?" QUERY ")?(#" QUERY ")?"

static const struct {
        const char *name, *regex;
} formats[SCHEMA_N_FORMATS] = {
        {"date-time", DATE "T" TIME},
        {"date", DATE},
        {"time", TIME},
        {"email", LOCAL_PART "@" HOSTNAME},
        {"uuid", HEX "{8}-" HEX "{4}-" HEX "{4}-" HEX "{4}-" HEX "{12}"},
        {"uri", URI},
        {"ipv4", IPV4},
        {"ipv6", IPV6},
        {"hostname", HOSTNAME},
};

int dse__schema_format_enforced(const char *format) {
        for (size_t i = 0; i < SCHEMA_N_FORMATS; i++)
                if (!strcmp(format, formats[i].name))
                        return 1;
        return 0;
}

int dse__schema_format_rule(struct schema_ctx *c, const char *format, uint32_t *ret_rule) {
        for (size_t i = 0; i < SCHEMA_N_FORMATS; i++) {
                if (strcmp(format, formats[i].name))
                        continue;
                if (c->format_rules[i] == 0) {
                        /* the string: a quote, the content, a quote */
                        struct dse_diag diag = {{0}};
                        uint32_t content, s;
                        int r = dse__regex_rule(&c->b, formats[i].regex, strlen(formats[i].regex), REGEX_JSON_STRING,
                                                &content, NULL, &diag);
                        if (r < 0)
                                return dse__schema_fail(c, r, "format", "%s", diag.msg);
                        GRAMMAR_TRY(dse__grammar_rule_new(&c->b, &s));
                        GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, s));
                        GRAMMAR_TRY(dse__grammar_push_byte(&c->b, s, '"'));
                        GRAMMAR_TRY(dse__grammar_push_ref(&c->b, s, content));
                        GRAMMAR_TRY(dse__grammar_push_byte(&c->b, s, '"'));
                        c->format_rules[i] = s + 1;
                }
                *ret_rule = c->format_rules[i] - 1;
                return 0;
        }
        return -ENOENT;
}
