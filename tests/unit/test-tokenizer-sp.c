/* SentencePiece .model tokenizers against the reference ids in the shared fixtures
 * (tokenizers/encodings/<name>.jsonl and <name>.special.jsonl, made with SentencePiece
 * 0.1.97): every line must encode to exactly the reference ids, and decoding those ids
 * must give the reference text byte for byte. Built once per model with SPM_NAME set
 * ("sp_bpe", "sp_unigram"). */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "dse.h"
#include "t.h"

#ifndef SPM_NAME
#error "SPM_NAME must name the fixture model"
#endif

static void put_utf8(char *out, size_t *len, uint32_t cp) {
        if (cp < 0x80) {
                out[(*len)++] = (char)cp;
        } else if (cp < 0x800) {
                out[(*len)++] = (char)(0xc0 | cp >> 6);
                out[(*len)++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
                out[(*len)++] = (char)(0xe0 | cp >> 12);
                out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                out[(*len)++] = (char)(0x80 | (cp & 0x3f));
        } else {
                out[(*len)++] = (char)(0xf0 | cp >> 18);
                out[(*len)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
                out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                out[(*len)++] = (char)(0x80 | (cp & 0x3f));
        }
}

/* Decodes the JSON string value of "key" in one line, keeping embedded NULs (cJSON's
 * NUL-terminated strings cannot). Inside a JSON string every quote is escaped, so the
 * pattern `"key": "` only matches the real key. Returns a malloc'ed buffer or NULL. */
static char *json_string_field(const char *line, const char *key, size_t *ret_len) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\": \"", key);
        const char *p = strstr(line, pat);
        if (!p)
                return NULL;
        p += strlen(pat);
        char *out = malloc(strlen(p) + 1);
        size_t n = 0;
        while (*p && *p != '"') {
                if (*p != '\\') {
                        out[n++] = *p++;
                        continue;
                }
                p++;
                char c = *p++;
                switch (c) {
                case 'n': out[n++] = '\n'; break;
                case 't': out[n++] = '\t'; break;
                case 'r': out[n++] = '\r'; break;
                case 'b': out[n++] = '\b'; break;
                case 'f': out[n++] = '\f'; break;
                case 'u': {
                        uint32_t cp = (uint32_t)strtoul((char[5]){p[0], p[1], p[2], p[3], 0}, NULL, 16);
                        p += 4;
                        if (cp >= 0xd800 && cp < 0xdc00 && p[0] == '\\' && p[1] == 'u') {
                                uint32_t lo = (uint32_t)strtoul((char[5]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                                p += 6;
                        }
                        put_utf8(out, &n, cp);
                        break;
                }
                default: out[n++] = c; break; /* \" \\ \/ */
                }
        }
        *ret_len = n;
        return out;
}

static void show_pieces(const struct dse_tokenizer *tok, const char *label, const int32_t *ids, int n, int at) {
        fprintf(stderr, "    %s:", label);
        for (int i = at - 3; i <= at + 3; i++) {
                if (i < 0 || i >= n)
                        continue;
                const char *p = dse_tokenizer_piece(tok, ids[i]);
                fprintf(stderr, " %s%d'%s'", i == at ? "*" : "", ids[i], p ? p : "?");
        }
        fprintf(stderr, "\n");
}

/* Runs one encodings file; returns the number of failing lines (or -1 when the file is
 * unusable). */
static int check_file(const struct dse_tokenizer *tok, const char *rel, int add_special, int *ret_lines) {
        size_t len;
        char *all = slurp(t_fixture(rel), &len);
        if (!all) {
                fprintf(stderr, "  cannot read %s\n", t_fixture(rel));
                return -1;
        }
        int lines = 0, bad = 0;
        size_t cap_ids = 1 << 16;
        int32_t *ids = malloc(cap_ids * sizeof *ids);
        char *dec = malloc(1 << 20);
        for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
                cJSON *j = cJSON_Parse(line);
                size_t text_len = 0, want_len = 0;
                char *text = json_string_field(line, "text", &text_len);
                char *want = json_string_field(line, "decoded", &want_len);
                const cJSON *jid = cJSON_GetObjectItem(j, "id"), *jids = cJSON_GetObjectItem(j, "ids");
                if (!j || !text || !want || !cJSON_IsString(jid) || !cJSON_IsArray(jids)) {
                        fprintf(stderr, "  %s line %d: malformed\n", rel, lines + 1);
                        bad++;
                        goto next;
                }
                lines++;
                int n_ref = cJSON_GetArraySize(jids);
                int32_t *ref = malloc(((size_t)n_ref + 1) * sizeof *ref);
                for (int i = 0; i < n_ref; i++)
                        ref[i] = (int32_t)cJSON_GetArrayItem(jids, i)->valuedouble;

                int n = dse_tokenizer_encode(tok, text, text_len, add_special, ids, cap_ids);
                int first = -1;
                if (n < 0) {
                        fprintf(stderr, "  %s %s: encode failed: %s\n", rel, jid->valuestring, strerror(-n));
                } else {
                        for (int i = 0; i < n && i < n_ref && first < 0; i++)
                                if (ids[i] != ref[i])
                                        first = i;
                        if (first < 0 && n != n_ref)
                                first = n < n_ref ? n : n_ref;
                        if (first >= 0) {
                                fprintf(stderr, "  %s %s: %d ids, reference %d; first difference at %d\n", rel,
                                        jid->valuestring, n, n_ref, first);
                                show_pieces(tok, "got", ids, n, first);
                                show_pieces(tok, "ref", ref, n_ref, first);
                        }
                }
                int d = dse_tokenizer_decode(tok, ref, (size_t)n_ref, dec, 1 << 20);
                bool dec_ok = d >= 0 && (size_t)d == want_len && memcmp(dec, want, want_len) == 0;
                if (!dec_ok) {
                        size_t at = 0;
                        while (d >= 0 && at < (size_t)d && at < want_len && dec[at] == want[at])
                                at++;
                        fprintf(stderr, "  %s %s: decode gave %d bytes, reference %zu; first difference at byte %zu\n",
                                rel, jid->valuestring, d, want_len, at);
                }
                if (n < 0 || first >= 0 || !dec_ok)
                        bad++;
                free(ref);
        next:
                free(text);
                free(want);
                cJSON_Delete(j);
        }
        free(ids);
        free(dec);
        free(all);
        *ret_lines = lines;
        return bad;
}

static struct dse_tokenizer *load(void) {
        struct dse_diag diag = {{0}};
        struct dse_tokenizer *tok = NULL;
        int r = dse_tokenizer_load_file(t_fixture("tokenizers/models/" SPM_NAME "/" SPM_NAME ".model"), &tok, &diag);
        if (r < 0)
                fprintf(stderr, "  load: %s: %s\n", strerror(-r), diag.msg);
        return tok;
}

TEST(vocab) {
        struct dse_tokenizer *tok = load();
        ASSERT_TRUE(tok);
        /* The .vocab file beside the model lists every piece, one per line, in id order. */
        size_t len;
        char *vocab = slurp(t_fixture("tokenizers/models/" SPM_NAME "/" SPM_NAME ".vocab"), &len);
        ASSERT_TRUE(vocab);
        int n = 0, mismatches = 0;
        for (char *line = strtok(vocab, "\n"); line; line = strtok(NULL, "\n"), n++) {
                char *tab = strchr(line, '\t');
                if (tab)
                        *tab = '\0';
                const char *p = dse_tokenizer_piece(tok, n);
                if (!p || strcmp(p, line) != 0)
                        mismatches++;
        }
        free(vocab);
        ASSERT_EQ(mismatches, 0);
        ASSERT_EQ(dse_tokenizer_n_vocab(tok), n);
        ASSERT_EQ(dse_tokenizer_bos(tok), 1);
        ASSERT_EQ(dse_tokenizer_eos(tok), 2);
        ASSERT_STREQ(dse_tokenizer_piece(tok, 1), "<s>");
        ASSERT_TRUE(dse_tokenizer_piece(tok, n) == NULL);
        dse_tokenizer_free(tok);
}

TEST(encodings) {
        struct dse_tokenizer *tok = load();
        ASSERT_TRUE(tok);
        int lines = 0, lines_special = 0;
        int bad = check_file(tok, "tokenizers/encodings/" SPM_NAME ".jsonl", 0, &lines);
        int bad_special = check_file(tok, "tokenizers/encodings/" SPM_NAME ".special.jsonl", 1, &lines_special);
        printf("%s: %d of %d lines agree (plain), %d of %d (add_special)\n", SPM_NAME, lines - bad, lines,
               lines_special - bad_special, lines_special);
        dse_tokenizer_free(tok);
        ASSERT_EQ(bad, 0);
        ASSERT_EQ(bad_special, 0);
        ASSERT_EQ(lines, 323);
        ASSERT_EQ(lines_special, 323);
}

/* A short output buffer: the calls report the full size and write only what fits. */
TEST(short_buffers) {
        struct dse_tokenizer *tok = load();
        ASSERT_TRUE(tok);
        const char *text = "In the beginning God created the heaven and the earth.";
        int32_t all[256], two[2] = {-7, -7};
        int n = dse_tokenizer_encode(tok, text, strlen(text), 1, all, 256);
        ASSERT_TRUE(n > 2);
        ASSERT_EQ(dse_tokenizer_encode(tok, text, strlen(text), 1, two, 2), n);
        ASSERT_EQ(two[0], all[0]);
        ASSERT_EQ(two[1], all[1]);
        ASSERT_EQ(dse_tokenizer_encode(tok, text, strlen(text), 1, NULL, 0), n);
        char buf[8];
        int d = dse_tokenizer_decode(tok, all, (size_t)n, buf, sizeof buf);
        ASSERT_EQ(d, (int)strlen(text));
        ASSERT_TRUE(memcmp(buf, text, sizeof buf) == 0);
        ASSERT_EQ(dse_tokenizer_decode(tok, all, (size_t)n, NULL, 0), d);
        int32_t bad_id = dse_tokenizer_n_vocab(tok);
        ASSERT_ERR(dse_tokenizer_decode(tok, &bad_id, 1, buf, sizeof buf), -EINVAL);
        dse_tokenizer_free(tok);
}
