/* Checking a tokenizer against the tokenizer fixtures' reference encodings
 * (fixtures/tokenizers/encodings/<name>.jsonl, chat/<name>.jsonl): every line must encode
 * to exactly the reference ids, and decoding the ids must give the reference text byte
 * for byte. Shared by the tokenizer.json and the GGUF tokenizer tests; include after
 * t.h, with dse.h and cJSON. */
#ifndef DSV_TESTS_TOKENIZER_ENCODINGS_H
#define DSV_TESTS_TOKENIZER_ENCODINGS_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "dse.h"
#include "t.h"

#define MAX_SHOWN 5

static void show_ids(const struct dse_tokenizer *tok, const char *label, const int32_t *ids, int n, int at) {
        fprintf(stderr, "    %s:", label);
        for (int i = at - 3 < 0 ? 0 : at - 3; i < n && i <= at + 3; i++) {
                const char *p = dse_tokenizer_piece(tok, ids[i]);
                fprintf(stderr, "%s %d'%s'", i == at ? " >>" : "", ids[i], p ? p : "?");
        }
        fprintf(stderr, "\n");
}

/* The raw value of string member `key` in one JSON line, decoded (cJSON stops strings at
 * \u0000, and the corpus has NULs). A `"key":` outside a string can only be a key:
 * inside a string every quote is escaped. Returns a malloc'ed buffer or NULL. */
static char *json_string_member(const char *line, const char *key, size_t *ret_len) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\":", key);
        const char *p = strstr(line, pat);
        if (!p)
                return NULL;
        p += strlen(pat);
        while (*p == ' ')
                p++;
        if (*p++ != '"')
                return NULL;
        char *out = malloc(strlen(p) + 1), *o = out;
        while (*p && *p != '"') {
                if (*p != '\\') {
                        *o++ = *p++;
                        continue;
                }
                p++;
                char e = *p++;
                unsigned cp = 0;
                switch (e) {
                case 'n': *o++ = '\n'; break;
                case 't': *o++ = '\t'; break;
                case 'r': *o++ = '\r'; break;
                case 'b': *o++ = '\b'; break;
                case 'f': *o++ = '\f'; break;
                case 'u':
                        sscanf(p, "%4x", &cp);
                        p += 4;
                        if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                                unsigned lo = 0;
                                sscanf(p + 2, "%4x", &lo);
                                p += 6;
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        }
                        if (cp < 0x80) {
                                *o++ = (char)cp;
                        } else if (cp < 0x800) {
                                *o++ = (char)(0xC0 | cp >> 6);
                                *o++ = (char)(0x80 | (cp & 0x3F));
                        } else if (cp < 0x10000) {
                                *o++ = (char)(0xE0 | cp >> 12);
                                *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
                                *o++ = (char)(0x80 | (cp & 0x3F));
                        } else {
                                *o++ = (char)(0xF0 | cp >> 18);
                                *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
                                *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
                                *o++ = (char)(0x80 | (cp & 0x3F));
                        }
                        break;
                default: *o++ = e; break;
                }
        }
        *o = '\0';
        *ret_len = (size_t)(o - out);
        return out;
}

/* Checks one encodings file (the text in member text_key); returns the number of lines
 * that disagree. */
static int check_file_key(const struct dse_tokenizer *tok, const char *rel, const char *text_key, int add_special,
                          int *ret_lines) {
        size_t len = 0;
        char *data = slurp(t_fixture(rel), &len);
        if (!data) {
                fprintf(stderr, "  cannot read %s\n", t_fixture(rel));
                return 1;
        }
        int lines = 0, enc_bad = 0, dec_bad = 0, shown = 0;
        size_t cap = 1 << 16;
        int32_t *got = malloc(cap * sizeof *got);
        char *text = malloc(1 << 20);
        for (char *line = data, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                nl = strchr(line, '\n');
                if (nl)
                        *nl = '\0';
                if (!*line)
                        continue;
                cJSON *j = cJSON_Parse(line);
                cJSON *id = cJSON_GetObjectItem(j, "id"), *ids = cJSON_GetObjectItem(j, "ids");
                size_t slen = 0, dlen = 0;
                char *s = json_string_member(line, text_key, &slen), *dec = json_string_member(line, "decoded", &dlen);
                if (!s || !dec || !cJSON_IsArray(ids) || !cJSON_IsString(id)) {
                        fprintf(stderr, "  %s: malformed line %d\n", rel, lines + 1);
                        enc_bad++;
                        free(s);
                        free(dec);
                        cJSON_Delete(j);
                        continue;
                }
                lines++;
                int n_want = cJSON_GetArraySize(ids);
                int32_t *want = malloc((size_t)(n_want ? n_want : 1) * sizeof *want);
                for (int i = 0; i < n_want; i++)
                        want[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
                int n = dse_tokenizer_encode(tok, s, slen, add_special, got, cap);
                int diff = -1;
                if (n < 0) {
                        diff = 0;
                } else {
                        for (int i = 0; i < n && i < n_want && diff < 0; i++)
                                if (got[i] != want[i])
                                        diff = i;
                        if (diff < 0 && n != n_want)
                                diff = n < n_want ? n : n_want;
                }
                if (diff >= 0) {
                        enc_bad++;
                        if (shown++ < MAX_SHOWN) {
                                fprintf(stderr, "  %s %s: ids differ at %d (got %d ids, want %d)%s%s\n", rel,
                                        id->valuestring, diff, n, n_want, n < 0 ? ": " : "",
                                        n < 0 ? strerror(-n) : "");
                                if (n >= 0)
                                        show_ids(tok, "got ", got, n, diff);
                                show_ids(tok, "want", want, n_want, diff);
                        }
                }
                int m = dse_tokenizer_decode(tok, want, (size_t)n_want, text, 1 << 20);
                if (m < 0 || (size_t)m != dlen || memcmp(text, dec, dlen) != 0) {
                        dec_bad++;
                        if (shown++ < MAX_SHOWN) {
                                size_t k = 0;
                                while (m >= 0 && k < (size_t)m && k < dlen && text[k] == dec[k])
                                        k++;
                                fprintf(stderr, "  %s %s: decoded text differs at byte %zu (got %d bytes, want %zu)\n",
                                        rel, id->valuestring, k, m, dlen);
                                fprintf(stderr, "    got : \"%.*s\"\n", m < 0 ? 0 : (m > 200 ? 200 : m), text);
                                fprintf(stderr, "    want: \"%.200s\"\n", dec);
                        }
                }
                free(want);
                free(s);
                free(dec);
                cJSON_Delete(j);
        }
        printf("%s: %d/%d encodings agree, %d/%d decodings agree\n", rel, lines - enc_bad, lines, lines - dec_bad,
               lines);
        free(got);
        free(text);
        free(data);
        *ret_lines = lines;
        return enc_bad + dec_bad;
}

static int check_file(const struct dse_tokenizer *tok, const char *rel, int add_special, int *ret_lines) {
        return check_file_key(tok, rel, "text", add_special, ret_lines);
}

#endif
