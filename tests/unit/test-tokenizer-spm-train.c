/* Differential test against SentencePiece itself (Debian's `sentencepiece` package, the
 * tools that train the bundled default model): models are trained with spm_train under
 * settings the fixtures do not cover (the default nmt_nfkc + remove_extra_whitespaces
 * BPE that a plain `spm_train --model_type=bpe` writes, treat_whitespace_as_suffix,
 * case folding, no dummy prefix, user-defined and control symbols, byte fallback in
 * Unigram), then every test line is encoded by spm_encode and by us, and the reference
 * ids are decoded by spm_decode and by us. Any difference fails with the line. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "dse.h"
#include "t.h"

static char dir[64];

static int run(const char *cmd) {
        int r = system(cmd);
        if (r != 0)
                fprintf(stderr, "  command failed (%d): %s\n", r, cmd);
        return r;
}

/* Splits buf in place into lines (without '\n'); returns the count. */
static int split_lines(char *buf, char **lines, int max) {
        int n = 0;
        for (char *p = buf; *p && n < max;) {
                char *nl = strchr(p, '\n');
                lines[n++] = p;
                if (!nl)
                        break;
                *nl = '\0';
                p = nl + 1;
        }
        return n;
}

#define MAX_LINES 1024

/* Test lines: the fixture corpus (one-line cases without NUL or CR) and seeded random
 * strings over pieces that stress normalization and whitespace handling. */
static int write_inputs(const char *train_path, const char *input_path) {
        size_t len;
        char *corpus = slurp(t_fixture("tokenizers/corpus.jsonl"), &len);
        if (!corpus)
                return -1;
        FILE *train = fopen(train_path, "w"), *input = fopen(input_path, "w");
        if (!train || !input)
                return -1;
        int n = 0;
        for (char *line = strtok(corpus, "\n"); line; line = strtok(NULL, "\n")) {
                cJSON *j = cJSON_Parse(line);
                const cJSON *text = cJSON_GetObjectItem(j, "text");
                if (cJSON_IsString(text)) {
                        /* training text: every line of every case */
                        fprintf(train, "%s\n", text->valuestring);
                        if (!strstr(line, "\\u0000") && !strchr(text->valuestring, '\n') &&
                            !strchr(text->valuestring, '\r') && n < MAX_LINES / 2) {
                                fprintf(input, "%s\n", text->valuestring);
                                n++;
                        }
                }
                cJSON_Delete(j);
        }
        static const char *const atoms[] = {
                "a", "b", "the", "The", " ", "  ", "   ", "\t", "\xe2\x96\x81", "\xef\xbc\xa1", /* Ａ */
                "\xef\xac\x81", /* ﬁ */ "\xc3\xa9", "e\xcc\x81", "\xe6\x97\xa5\xe6\x9c\xac", "<tool>", "@@", "<ctl>",
                "1", "23", "\xc3\xb1", "\xf0\x9f\x98\x80", "\xc2\xa0", "x", "LORD", "\xe3\x80\x80", /* ideographic space */
                "\xe2\x91\xa0", /* ① */ "\xc2\xbd", "q", "\xd0\x96", "\xea\xb0\x80", ",", ".",
        };
        uint64_t seed = 0x5eed5eedULL;
        for (int i = 0; i < 300; i++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                int k = 1 + (int)((seed >> 33) % 14);
                for (int a = 0; a < k; a++) {
                        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                        fputs(atoms[(seed >> 33) % (sizeof atoms / sizeof atoms[0])], input);
                }
                fputc('\n', input);
                n++;
        }
        fclose(train);
        fclose(input);
        free(corpus);
        return n;
}

static void check_config(const char *name, const char *flags) {
        char train[128], input[128], cmd[2048], model[128], ids_path[128], dec_path[128];
        snprintf(train, sizeof train, "%s/train.txt", dir);
        snprintf(input, sizeof input, "%s/input.txt", dir);
        snprintf(model, sizeof model, "%s/%s.model", dir, name);
        snprintf(ids_path, sizeof ids_path, "%s/%s.ids", dir, name);
        snprintf(dec_path, sizeof dec_path, "%s/%s.dec", dir, name);
        int n_inputs = write_inputs(train, input);
        ASSERT_TRUE(n_inputs > 300);
        snprintf(cmd, sizeof cmd, "spm_train --input=%s --model_prefix=%s/%s %s >%s/%s.log 2>&1", train, dir, name,
                 flags, dir, name);
        ASSERT_EQ(run(cmd), 0);
        snprintf(cmd, sizeof cmd, "spm_encode --model=%s --output_format=id <%s >%s", model, input, ids_path);
        ASSERT_EQ(run(cmd), 0);
        snprintf(cmd, sizeof cmd, "spm_decode --model=%s --input_format=id <%s >%s", model, ids_path, dec_path);
        ASSERT_EQ(run(cmd), 0);

        struct dse_diag diag = {{0}};
        struct dse_tokenizer *tok = NULL;
        int r = dse_tokenizer_load_file(model, &tok, &diag);
        if (r < 0)
                T_FAIL("%s: load: %s: %s", name, strerror(-r), diag.msg);
        char *in_buf = slurp(input, NULL), *ids_buf = slurp(ids_path, NULL), *dec_buf = slurp(dec_path, NULL);
        ASSERT_TRUE(in_buf && ids_buf && dec_buf);
        static char *in_lines[MAX_LINES], *id_lines[MAX_LINES], *dec_lines[MAX_LINES];
        int n_in = split_lines(in_buf, in_lines, MAX_LINES);
        int n_ids = split_lines(ids_buf, id_lines, MAX_LINES);
        int n_dec = split_lines(dec_buf, dec_lines, MAX_LINES);
        ASSERT_EQ(n_in, n_inputs);
        ASSERT_EQ(n_ids, n_inputs);
        ASSERT_EQ(n_dec, n_inputs);

        static int32_t ref[8192], got[8192];
        static char out[65536];
        int bad = 0;
        for (int i = 0; i < n_in; i++) {
                int n_ref = 0;
                for (char *p = id_lines[i], *end; *p && n_ref < 8192; p = end) {
                        ref[n_ref++] = (int32_t)strtol(p, &end, 10);
                        if (end == p)
                                break;
                }
                int n = dse_tokenizer_encode(tok, in_lines[i], strlen(in_lines[i]), 0, got, 8192);
                bool same = n == n_ref && memcmp(got, ref, (size_t)n * sizeof *got) == 0;
                int d = dse_tokenizer_decode(tok, ref, (size_t)n_ref, out, sizeof out);
                bool dec_same = d == (int)strlen(dec_lines[i]) && memcmp(out, dec_lines[i], (size_t)d) == 0;
                if (!same || !dec_same) {
                        if (bad++ < 5) {
                                fprintf(stderr, "  %s line %d: \"%s\"\n    spm_encode: %s\n    ours:      ", name, i + 1,
                                        in_lines[i], id_lines[i]);
                                for (int k = 0; k < n; k++)
                                        fprintf(stderr, "%d ", got[k]);
                                fprintf(stderr, "\n    spm_decode: \"%s\"\n    ours:       \"%.*s\"\n", dec_lines[i],
                                        d < 0 ? 0 : d, out);
                        }
                }
        }
        printf("%s: %d of %d lines agree with spm_encode/spm_decode\n", name, n_in - bad, n_in);
        free(in_buf);
        free(ids_buf);
        free(dec_buf);
        dse_tokenizer_free(tok);
        ASSERT_EQ(bad, 0);
}

static bool setup(void) {
        if (dir[0])
                return true;
        snprintf(dir, sizeof dir, "/tmp/dsv-spm-train-XXXXXX");
        return mkdtemp(dir) != NULL;
}

/* What a plain `spm_train --model_type=bpe` writes (the bundled default model's kind):
 * nmt_nfkc charsmap, whitespace trimmed and collapsed, dummy prefix, no byte fallback. */
TEST(plain_bpe) {
        ASSERT_TRUE(setup());
        check_config("plain_bpe", "--model_type=bpe --vocab_size=800 --hard_vocab_limit=false");
}

TEST(unigram_suffix_bytes_user) {
        ASSERT_TRUE(setup());
        check_config("unigram_suffix", "--model_type=unigram --vocab_size=600 --hard_vocab_limit=false "
                                       "--byte_fallback --treat_whitespace_as_suffix --character_coverage=0.98 "
                                       "'--user_defined_symbols=<tool>,@@'");
}

TEST(bpe_casefold_no_dummy_prefix) {
        ASSERT_TRUE(setup());
        check_config("bpe_cf", "--model_type=bpe --vocab_size=600 --hard_vocab_limit=false --add_dummy_prefix=false "
                               "--normalization_rule_name=nmt_nfkc_cf --character_coverage=0.98 --split_digits "
                               "'--user_defined_symbols=<tool>,@@' '--control_symbols=<ctl>'");
}

TEST(unigram_identity_keep_spaces) {
        ASSERT_TRUE(setup());
        check_config("unigram_id", "--model_type=unigram --vocab_size=1200 --hard_vocab_limit=false "
                                   "--normalization_rule_name=identity --remove_extra_whitespaces=false "
                                   "--allow_whitespace_only_pieces '--control_symbols=<ctl>'");
}

/* Custom rules: a normalization TSV compiled into precompiled_charsmap (multi-character
 * sources, deletion) and a denormalization TSV, which SentencePiece applies to decoded
 * text. */
TEST(bpe_custom_rules_and_denormalizer) {
        ASSERT_TRUE(setup());
        char norm[128], denorm[128], flags[512];
        snprintf(norm, sizeof norm, "%s/norm.tsv", dir);
        snprintf(denorm, sizeof denorm, "%s/denorm.tsv", dir);
        FILE *f = fopen(norm, "w");
        ASSERT_TRUE(f);
        /* Ａ->A, ideographic space->space, "ﬁ"->"fi", "th"->"TH", tab->space, soft hyphen->"" */
        fputs("FF21\t41\n3000\t20\nFB01\t66 69\n74 68\t54 48\n9\t20\nAD\t\n", f);
        fclose(f);
        f = fopen(denorm, "w");
        ASSERT_TRUE(f);
        fputs("71\t51\n54 48\t74 68\n", f); /* q->Q, "TH"->"th" */
        fclose(f);
        snprintf(flags, sizeof flags,
                 "--model_type=bpe --vocab_size=1200 --hard_vocab_limit=false --byte_fallback "
                 "--character_coverage=0.98 --normalization_rule_tsv=%s --denormalization_rule_tsv=%s",
                 norm, denorm);
        check_config("bpe_rules", flags);
}

/* The WORD and CHAR model types. (spm_encode 0.1.97 itself fails on a WORD model
 * trained with --treat_whitespace_as_suffix, so that case has no reference.) */
TEST(word_and_char_models) {
        ASSERT_TRUE(setup());
        check_config("word", "--model_type=word --vocab_size=600 --hard_vocab_limit=false");
        check_config("word_ws_only", "--model_type=word --vocab_size=600 --hard_vocab_limit=false "
                                     "--allow_whitespace_only_pieces --remove_extra_whitespaces=false");
        check_config("char", "--model_type=char --vocab_size=400 --hard_vocab_limit=false --character_coverage=0.98 "
                             "'--user_defined_symbols=<tool>,@@'");
}

TEST(cleanup) {
        char cmd[128];
        if (dir[0]) {
                snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
                ASSERT_EQ(system(cmd), 0);
        }
}
