/* Split regexes: tokenizers compiles them with Oniguruma (Ruby syntax, Unicode); we use
 * PCRE2 with UTF|UCP. The two agree on every construct these files use except the
 * shorthand classes, which PCRE2 defines differently under UCP:
 *   \s  onig: White_Space (no U+180E);  PCRE2: \p{Z}, \h, \v (includes U+180E)
 *   \w  onig: Letter|Mark|Nd|Pc;        PCRE2: \p{L}|\p{N}|_ (no marks)
 *   \h  onig: a hex digit;              PCRE2: horizontal space
 * so they are rewritten to explicit classes before compiling. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "bpe_impl.h"

static const char WS_SET[] = "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
                             "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
static const char WORD_SET[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
static const char HEX_SET[] = "0-9a-fA-F";

static int put_class(struct tok_buf *b, const char *set, int negate, int in_class) {
        int r = 0;
        if (!in_class)
                r = dse__tok_buf_put(b, negate ? "[^" : "[", negate ? 2 : 1);
        if (r == 0)
                r = dse__tok_buf_put(b, set, strlen(set));
        if (r == 0 && !in_class)
                r = dse__tok_buf_put(b, "]", 1);
        return r;
}

/* Rewrites onig-only meanings into PCRE2 syntax (see the top of this file). Negated
 * shorthands inside a class (`[\S...]`) have no flat PCRE2 spelling and are kept. */
static int translate(const char *pat, size_t len, struct tok_buf *out) {
        int in_class = 0, r = 0;
        for (size_t i = 0; i < len && r == 0; i++) {
                char c = pat[i];
                if (c == '\\' && i + 1 < len) {
                        char e = pat[i + 1];
                        const char *set = NULL;
                        int negate = 0;
                        switch (e) {
                        case 's': set = WS_SET; break;
                        case 'S': set = WS_SET; negate = 1; break;
                        case 'w': set = WORD_SET; break;
                        case 'W': set = WORD_SET; negate = 1; break;
                        case 'h': set = HEX_SET; break;
                        case 'H': set = HEX_SET; negate = 1; break;
                        default: break;
                        }
                        if (set && !(negate && in_class))
                                r = put_class(out, set, negate, in_class);
                        else
                                r = dse__tok_buf_put(out, pat + i, 2);
                        i++;
                        continue;
                }
                if (c == '[' && !in_class) {
                        in_class = 1;
                        r = dse__tok_buf_put(out, "[", 1);
                        /* a leading ^ and a leading ] belong to the class */
                        if (r == 0 && i + 1 < len && pat[i + 1] == '^')
                                r = dse__tok_buf_put(out, pat + ++i, 1);
                        if (r == 0 && i + 1 < len && pat[i + 1] == ']')
                                r = dse__tok_buf_put(out, pat + ++i, 1);
                        continue;
                }
                if (c == '[' && in_class && i + 1 < len && pat[i + 1] == ':') {
                        /* POSIX class [:alpha:] inside a set: copy through ":]" */
                        const char *endp = NULL;
                        for (size_t k = i + 2; k + 1 < len; k++)
                                if (pat[k] == ':' && pat[k + 1] == ']') {
                                        endp = pat + k + 2;
                                        break;
                                }
                        if (endp) {
                                r = dse__tok_buf_put(out, pat + i, (size_t)(endp - (pat + i)));
                                i = (size_t)(endp - pat) - 1;
                                continue;
                        }
                }
                if (c == ']' && in_class)
                        in_class = 0;
                r = dse__tok_buf_put(out, &c, 1);
        }
        return r;
}

static int compile(struct bpe_regex *re, const char *pat, size_t len, uint32_t extra_opts, const char *shown,
                   struct dse_diag *reterr) {
        int errcode;
        PCRE2_SIZE erroff;
        memset(re, 0, sizeof *re);
        re->code = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP | extra_opts, &errcode, &erroff, NULL);
        if (!re->code) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(errcode, msg, sizeof msg);
                return dse__fail(reterr, -EBADMSG, "split regex '%.200s': %s at offset %zu", shown, (char *)msg,
                                 (size_t)erroff);
        }
        re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
        return 0;
}

int dse__bpe_regex_compile(struct bpe_regex *re, const char *pattern, size_t len, struct dse_diag *reterr) {
        struct tok_buf b = {0};
        int r = translate(pattern, len, &b);
        if (r == 0)
                r = compile(re, b.p ? b.p : "", b.len, 0, pattern, reterr);
        dse__tok_buf_done(&b);
        return r;
}

int dse__bpe_regex_compile_literal(struct bpe_regex *re, const char *lit, size_t len, struct dse_diag *reterr) {
        return compile(re, lit, len, PCRE2_LITERAL, lit, reterr);
}

void dse__bpe_regex_done(struct bpe_regex *re) {
        pcre2_code_free(re->code);
        memset(re, 0, sizeof *re);
}

int dse__bpe_regex_find(const struct bpe_regex *re, pcre2_match_data *md, const char *s, size_t len, size_t pos,
                   size_t *ret_start, size_t *ret_end) {
        int rc;
        if (re->jit) {
                rc = pcre2_jit_match(re->code, (PCRE2_SPTR)s, len, pos, 0, md, NULL);
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* deep backtracking: the interpreter uses the heap */
                        rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                                         NULL);
        } else {
                rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        }
        if (rc == PCRE2_ERROR_NOMATCH)
                return 0;
        if (rc < 0)
                return rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_HEAPLIMIT ? -ENOMEM : -E2BIG;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        *ret_start = ov[0];
        *ret_end = ov[1];
        return 1;
}
