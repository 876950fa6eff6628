/* GGUF tokenizers: the fixture tokenizers written into GGUF metadata the way llama.cpp's
 * converter writes them (tokens by id with [PADn] fill-ins, token types, merges as
 * "a b", scores for SentencePiece, the pre-tokenizer by name, special ids), read back by
 * the importer (dse__gguf_tokenizer_files) and loaded as the converted model loads them,
 * must give the reference ids of tokenizers/encodings/<name>.jsonl on every corpus text,
 * and decode them back to the reference text. Broken tokenizer metadata is an error. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "gguf_writer.h"
#include "model/gguf/gguf.h"
#include "t.h"
#include "tok/spm_model.h"
#include "tokenizer-encodings.h"

/* tokenizer.json (byte-level BPE) -> GGUF tokenizer keys */
static void write_bpe_vocab(struct gguf_writer *w, const char *json_path, const char *pre) {
        size_t len = 0;
        char *text = slurp(json_path, &len);
        cJSON *root = cJSON_ParseWithLength(text, len);
        free(text);
        cJSON *model = cJSON_GetObjectItem(root, "model"), *vocab = cJSON_GetObjectItem(model, "vocab");
        cJSON *added = cJSON_GetObjectItem(root, "added_tokens"), *merges = cJSON_GetObjectItem(model, "merges");
        int n = 0;
        for (cJSON *e = vocab->child; e; e = e->next)
                n = e->valueint + 1 > n ? e->valueint + 1 : n;
        for (cJSON *e = added->child; e; e = e->next)
                n = cJSON_GetObjectItem(e, "id")->valueint + 1 > n ? cJSON_GetObjectItem(e, "id")->valueint + 1 : n;
        const char **toks = calloc((size_t)n, sizeof *toks);
        int32_t *types = calloc((size_t)n, sizeof *types);
        char (*pad)[24] = calloc((size_t)n, sizeof *pad);
        for (cJSON *e = vocab->child; e; e = e->next) {
                toks[e->valueint] = e->string;
                types[e->valueint] = 1;
        }
        for (cJSON *e = added->child; e; e = e->next) {
                int id = cJSON_GetObjectItem(e, "id")->valueint;
                toks[id] = cJSON_GetObjectItem(e, "content")->valuestring;
                types[id] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) ? 3 : 4;
        }
        for (int i = 0; i < n; i++)
                if (!toks[i]) {
                        snprintf(pad[i], sizeof pad[i], "[PAD%d]", i);
                        toks[i] = pad[i];
                        types[i] = 5;
                }
        int nm = cJSON_GetArraySize(merges);
        char **ms = calloc((size_t)nm, sizeof *ms);
        int i = 0;
        for (cJSON *e = merges->child; e; e = e->next, i++) {
                if (cJSON_IsString(e)) {
                        ms[i] = strdup(e->valuestring);
                } else {
                        const char *a = e->child->valuestring, *b = e->child->next->valuestring;
                        ms[i] = malloc(strlen(a) + strlen(b) + 2);
                        sprintf(ms[i], "%s %s", a, b);
                }
        }
        gguf_kv_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_kv_str(w, "tokenizer.ggml.pre", pre);
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, (size_t)n);
        gguf_kv_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n);
        gguf_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL, (size_t)nm);
        gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", 0);
        for (i = 0; i < nm; i++)
                free(ms[i]);
        free(ms);
        free(pad);
        free(types);
        free(toks);
        cJSON_Delete(root);
}

/* a SentencePiece .model -> GGUF "llama" keys, as the converter copies them */
static void write_spm_vocab(struct gguf_writer *w, const char *model_path) {
        size_t len = 0;
        char *data = slurp(model_path, &len);
        struct spm_proto p;
        if (dse__spm_proto_parse(data, len, &p, NULL) < 0)
                abort();
        const char **toks = calloc((size_t)p.n_pieces, sizeof *toks);
        size_t *lens = calloc((size_t)p.n_pieces, sizeof *lens);
        float *scores = calloc((size_t)p.n_pieces, sizeof *scores);
        int32_t *types = calloc((size_t)p.n_pieces, sizeof *types);
        for (int i = 0; i < p.n_pieces; i++) {
                toks[i] = p.pieces[i].piece.ptr;
                lens[i] = p.pieces[i].piece.len;
                scores[i] = p.pieces[i].score;
                types[i] = p.pieces[i].type;
        }
        gguf_kv_str(w, "tokenizer.ggml.model", "llama");
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", toks, lens, (size_t)p.n_pieces);
        gguf_kv_arr_f32(w, "tokenizer.ggml.scores", scores, (size_t)p.n_pieces);
        gguf_kv_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)p.n_pieces);
        gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)p.bos_id);
        gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)p.eos_id);
        gguf_kv_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)p.unk_id);
        gguf_kv_bool(w, "tokenizer.ggml.add_space_prefix", p.normalizer.add_dummy_prefix);
        free(toks);
        free(lens);
        free(scores);
        free(types);
        dse__spm_proto_done(&p);
        free(data);
}

/* parses the GGUF bytes, builds the tokenizer files and loads them as dse_model_tokenizer
 * does (or, proto_only, the SentencePiece model alone, as SentencePiece reads it) */
static struct dse_tokenizer *load(struct gguf_writer *w, struct dse_diag *diag, int *ret_err, int proto_only) {
        size_t n;
        uint8_t *b = gguf_writer_bytes(w, &n);
        struct dse__gguf *g = NULL;
        struct dse__gguf_tokenizer t;
        struct dse_tokenizer *tok = NULL;
        int r = dse__gguf_parse(b, n, "t.gguf", &g, diag);
        if (r == 0)
                r = dse__gguf_tokenizer_files(g, "t.gguf", &t, diag);
        if (r == 0 && t.json)
                r = dse_tokenizer_load_hf(t.json, t.json_len, t.config, t.config_len, &tok, diag);
        else if (r == 0 && proto_only)
                r = dse_tokenizer_load_spm(t.spm, t.spm_len, &tok, diag);
        else if (r == 0)
                r = dse_tokenizer_load_spm_hf(t.spm, t.spm_len, t.config, t.config_len, &tok, diag);
        if (r == 0)
                dse__gguf_tokenizer_free(&t);
        dse__gguf_free(g);
        free(b);
        *ret_err = r;
        return tok;
}

/* the plain (no special tokens) reference encodings and decodings of one fixture */
static void check_encodings(const char *name, const struct dse_tokenizer *tok) {
        char rel[256];
        snprintf(rel, sizeof rel, "tokenizers/encodings/%s.jsonl", name);
        int lines = 0, bad = check_file(tok, rel, 0, &lines);
        if (bad || lines < 300)
                T_FAIL("%s: %d of %d lines differ", name, bad, lines);
}

static void bpe_case(const char *name, const char *pre) {
        char path[512];
        snprintf(path, sizeof path, "tokenizers/models/%s/tokenizer.json", name);
        struct gguf_writer *w = gguf_writer_new();
        write_bpe_vocab(w, t_fixture(path), pre);
        struct dse_diag diag = {{0}};
        int r;
        struct dse_tokenizer *tok = load(w, &diag, &r, 0);
        gguf_writer_free(w);
        if (!tok)
                T_FAIL("%s: %s (%s)", name, strerror(-r), diag.msg);
        check_encodings(name, tok);
        dse_tokenizer_free(tok);
}

TEST(qwen2_5_gpt2_vocab) { bpe_case("qwen2_5", "qwen2"); }
TEST(llama3_gpt2_vocab) { bpe_case("llama3", "llama-bpe"); }
TEST(deepseek_v3_gpt2_vocab) { bpe_case("deepseek_v3", "deepseek-v3"); }

/* The "llama" vocabulary: the SentencePiece model made from the GGUF keys encodes as
 * SentencePiece does (the reference, plain and with BOS); with its tokenizer_config.json,
 * as the converted model loads it, BOS is the GGUF's bos_token_id and is added. (That
 * loader also matches "<s>" written in the text, as transformers' LlamaTokenizer does and
 * SentencePiece does not, the same as for a Hugging Face folder.) */
TEST(sp_bpe_llama_vocab) {
        for (int proto_only = 1; proto_only >= 0; proto_only--) {
                struct gguf_writer *w = gguf_writer_new();
                write_spm_vocab(w, t_fixture("tokenizers/models/sp_bpe/sp_bpe.model"));
                struct dse_diag diag = {{0}};
                int r;
                struct dse_tokenizer *tok = load(w, &diag, &r, proto_only);
                gguf_writer_free(w);
                if (!tok)
                        T_FAIL("sp_bpe: %s (%s)", strerror(-r), diag.msg);
                ASSERT_EQ(dse_tokenizer_bos(tok), 1);
                int lines = 0, bad = 0;
                if (proto_only) {
                        bad = check_file(tok, "tokenizers/encodings/sp_bpe.jsonl", 0, &lines);
                        bad += check_file(tok, "tokenizers/encodings/sp_bpe.special.jsonl", 1, &lines);
                } else {
                        int32_t ids[8];
                        ASSERT_TRUE(dse_tokenizer_encode(tok, "Hello", 5, 1, ids, 8) > 1);
                        ASSERT_EQ(ids[0], 1);
                }
                dse_tokenizer_free(tok);
                if (bad || (proto_only && lines < 300))
                        T_FAIL("sp_bpe: %d of %d lines differ", bad, lines);
        }
}

static void expect_error(struct gguf_writer *w, int err, const char *frag) {
        struct dse_diag diag = {{0}};
        int r;
        struct dse_tokenizer *tok = load(w, &diag, &r, 0);
        gguf_writer_free(w);
        dse_tokenizer_free(tok);
        if (r != err || !strstr(diag.msg, frag))
                T_FAIL("got %d '%s'; want %d with '%s'", r, diag.msg, err, frag);
}

TEST(broken_tokenizer_metadata) {
        const char *toks[] = {"a", "b", "ab"};
        float scores[] = {0, 0};
        struct gguf_writer *w = gguf_writer_new();
        gguf_kv_str(w, "tokenizer.ggml.model", "bert");
        expect_error(w, -EOPNOTSUPP, "tokenizer.ggml.model 'bert' is not supported");
        w = gguf_writer_new();
        gguf_kv_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_kv_str(w, "tokenizer.ggml.pre", "falcon");
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 3);
        expect_error(w, -EOPNOTSUPP, "tokenizer.ggml.pre 'falcon' is not supported");
        w = gguf_writer_new();
        gguf_kv_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 3);
        expect_error(w, -EBADMSG, "needs tokenizer.ggml.merges");
        w = gguf_writer_new();
        gguf_kv_str(w, "tokenizer.ggml.model", "llama");
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 3);
        gguf_kv_arr_f32(w, "tokenizer.ggml.scores", scores, 2);
        expect_error(w, -EBADMSG, "tokenizer.ggml.scores' has 2 entries");
        w = gguf_writer_new();
        gguf_kv_str(w, "tokenizer.ggml.model", "llama");
        gguf_kv_u32(w, "tokenizer.ggml.tokens", 3);
        expect_error(w, -EBADMSG, "tokenizer.ggml.tokens' is not an array");
        w = gguf_writer_new();
        gguf_kv_str(w, "tokenizer.ggml.model", "llama");
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 3);
        gguf_kv_arr_f32(w, "tokenizer.ggml.scores", (float[]){0, 0, 0}, 3);
        gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", 7);
        expect_error(w, -EBADMSG, "bos_token_id': id 7 is outside the 3 tokens");
}

/* tokenizer.chat_template and the special ids reach the loaded tokenizer. */
TEST(chat_template_and_special_ids) {
        const char *toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "b"};
        float scores[] = {0, 0, 0, -1, -2};
        int32_t types[] = {2, 3, 3, 1, 1};
        const char *tmpl = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
        struct gguf_writer *w = gguf_writer_new();
        gguf_kv_str(w, "tokenizer.ggml.model", "llama");
        gguf_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 5);
        gguf_kv_arr_f32(w, "tokenizer.ggml.scores", scores, 5);
        gguf_kv_arr_i32(w, "tokenizer.ggml.token_type", types, 5);
        gguf_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
        gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
        gguf_kv_str(w, "tokenizer.chat_template", tmpl);
        struct dse_diag diag = {{0}};
        int r;
        struct dse_tokenizer *tok = load(w, &diag, &r, 0);
        gguf_writer_free(w);
        if (!tok)
                T_FAIL("%s (%s)", strerror(-r), diag.msg);
        ASSERT_EQ(dse_tokenizer_bos(tok), 1);
        ASSERT_EQ(dse_tokenizer_eos(tok), 2);
        ASSERT_TRUE(dse_tokenizer_chat_template(tok) != NULL);
        ASSERT_STREQ(dse_tokenizer_chat_template(tok), tmpl);
        int32_t ids[8];
        ASSERT_EQ(dse_tokenizer_encode(tok, "ab", 2, 1, ids, 8), 3); /* <s> ▁a b */
        ASSERT_EQ(ids[0], 1);
        ASSERT_EQ(ids[1], 3);
        ASSERT_EQ(ids[2], 4);
        dse_tokenizer_free(tok);
}
