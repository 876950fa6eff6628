/* The worker's constrained sampling on the bundled default model (models/default, with
 * its tokenizer): grammar masks from the engine applied in the scheduler, in one batch
 * with unconstrained sequences, masks computed on a two-thread pool. What the replies
 * must be is judged by cJSON parsing them and by the schemas' own terms (required
 * members, enum values, bounds), not by the grammar engine that produced them. */
#include <cjson/cJSON.h>
#include <math.h>

#include "dse.h"
#include "dsv_ipc.h"
#include "sampling.h"
#include "scheduler.h"
#include "t.h"

#define N_REQ 8

struct out {
        char text[N_REQ][2048];
        int32_t first[N_REQ];
        int n_tok[N_REQ];
        char reason[N_REQ][16];
        int error[N_REQ]; /* code + 1 */
        char error_msg[N_REQ][256];
        int top_bytes_seen;
        int32_t toks[N_REQ][256]; /* the first 256 tokens of each reply, and their logprobs */
        float lp[N_REQ][256];
};

static void on_event(void *user, const struct dsv_ipc_msg *m) {
        struct out *o = user;
        if (m->type == DSV_IPC_TOKEN && m->u.token.id < N_REQ) {
                uint64_t id = m->u.token.id;
                if (o->n_tok[id] < 256) {
                        o->toks[id][o->n_tok[id]] = m->u.token.token;
                        o->lp[id][o->n_tok[id]] = m->u.token.logprob;
                }
                if (o->n_tok[id]++ == 0)
                        o->first[id] = m->u.token.token;
                strncat(o->text[id], m->u.token.text, sizeof o->text[id] - strlen(o->text[id]) - 1);
                if (m->u.token.top_bytes)
                        o->top_bytes_seen++;
        } else if (m->type == DSV_IPC_FINAL && m->u.final.id < N_REQ) {
                snprintf(o->reason[m->u.final.id], 16, "%s", m->u.final.finish_reason);
        } else if (m->type == DSV_IPC_ERROR && m->u.error.id < N_REQ) {
                o->error[m->u.error.id] = (int)m->u.error.code + 1;
                snprintf(o->error_msg[m->u.error.id], 256, "%s", m->u.error.message);
        }
}

static struct dse_model *model;
static struct dse_tokenizer *tok;
static struct dse_pool *pool;

static int open_default(void) {
        if (model)
                return 0;
        char dir[1024], native[4096];
        snprintf(dir, sizeof dir, "%s/models/default", getenv("DSV_SOURCE_DIR") ? getenv("DSV_SOURCE_DIR") : "..");
        if (!getenv("DSV_CACHE_DIR") && getenv("DSV_BUILD_DIR")) {
                char cache[1100];
                snprintf(cache, sizeof cache, "%s/model-cache", getenv("DSV_BUILD_DIR"));
                setenv("DSV_CACHE_DIR", cache, 1);
        }
        struct dse_diag diag = {{0}};
        int r;
        if ((r = dse_model_resolve(dir, native, sizeof native, &diag)) < 0 ||
            (r = dse_model_open(native, 0, &model, &diag)) < 0 || (r = dse_model_tokenizer(model, &tok, &diag)) < 0 ||
            (r = dse_pool_new(2, NULL, 0, &pool)) < 0)
                fprintf(stderr, "  default model: %s\n", diag.msg);
        return r;
}

struct rig {
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        struct sched *s;
        struct out o;
};

static int rig_init(struct rig *g, int max_batch) {
        memset(g, 0, sizeof *g);
        int r;
        if ((r = open_default()) < 0)
                return r;
        if ((r = dse_kv_cache_new(model, 64u << 20, 16, max_batch, 512, &g->kv, NULL)) < 0 ||
            (r = dse_batch_new(model, g->kv, pool, &g->b, NULL)) < 0)
                return r;
        struct sched_config cfg = {max_batch, 512, 512, 16};
        if ((r = sched_new(&cfg, model, tok, g->kv, g->b, on_event, &g->o, &g->s)) < 0)
                return r;
        sched_set_pool(g->s, pool);
        return 0;
}

static void rig_done(struct rig *g) {
        sched_free(g->s);
        dse_batch_free(g->b);
        dse_kv_cache_free(g->kv);
}

static int add(struct rig *g, uint64_t id, const char *schema, int max_tokens, float temperature,
               const struct dsv_ipc_logit_bias *bias, size_t n_bias, const struct dsv_ipc_sampling *sp) {
        int32_t ids[64];
        const char *prompt = "And God said";
        int n = dse_tokenizer_encode(tok, prompt, strlen(prompt), 1, ids, 64);
        if (n < 0)
                return n;
        struct dsv_ipc_request req = {.id = id, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = max_tokens};
        if (sp)
                req.sampling = *sp;
        else
                dsv_ipc_sampling_init(&req.sampling);
        req.sampling.temperature = temperature;
        req.sampling.seed = 7 + id;
        req.sampling.has_seed = 1;
        req.constraint = !schema ? DSV_IPC_CONSTRAINT_NONE
                         : !schema[0] ? DSV_IPC_CONSTRAINT_JSON_OBJECT
                                      : DSV_IPC_CONSTRAINT_JSON_SCHEMA;
        req.constraint_text = schema && schema[0] ? (char *)schema : NULL;
        req.logit_bias = (struct dsv_ipc_logit_bias *)bias;
        req.n_logit_bias = n_bias;
        return sched_add(g->s, &req, ids, (size_t)n, 0);
}

static int run(struct rig *g) {
        for (int steps = 0; sched_busy(g->s) && steps < 4000; steps++)
                if (sched_step(g->s, 0) < 0)
                        return -EIO;
        return sched_busy(g->s) ? -ETIMEDOUT : 0;
}

static const char *person =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
        "\"age\":{\"type\":\"integer\"},\"role\":{\"enum\":[\"king\",\"prophet\",\"priest\"]}},"
        "\"required\":[\"name\",\"age\",\"role\"],\"additionalProperties\":false}";
static const char *list = "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":2,\"maxItems\":4}";

static int digits_only(const char *s) {
        for (; *s; s++)
                if (*s < '0' || *s > '9')
                        return 0;
        return 1;
}

/* Constrained and unconstrained requests share the batch; every constrained one ends
 * "stop" with a reply its schema accepts, the unconstrained ones run as usual. */
TEST(batch_mixes_constrained_and_unconstrained) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 8));
        ASSERT_OK(add(&g, 0, person, 200, 0.0f, NULL, 0, NULL));
        ASSERT_OK(add(&g, 1, NULL, 24, 0.8f, NULL, 0, NULL));
        ASSERT_OK(add(&g, 2, person, 200, 0.9f, NULL, 0, NULL));
        ASSERT_OK(add(&g, 3, list, 200, 1.0f, NULL, 0, NULL));
        ASSERT_OK(add(&g, 4, NULL, 24, 0.0f, NULL, 0, NULL));
        ASSERT_OK(add(&g, 5, "", 200, 0.7f, NULL, 0, NULL));
        ASSERT_OK(run(&g));
        for (int id = 0; id < 6; id++) {
                ASSERT_EQ(g.o.error[id], 0);
                if (id == 1 || id == 4) { /* unconstrained: ends by EOS or at max_tokens */
                        ASSERT_TRUE(g.o.n_tok[id] > 0);
                        ASSERT_TRUE(strcmp(g.o.reason[id], "length") == 0 || strcmp(g.o.reason[id], "stop") == 0);
                        continue;
                }
                if (getenv("DSV_TEST_VERBOSE"))
                        fprintf(stderr, "  %d: %s\n", id, g.o.text[id]);
                if (id == 5 && strcmp(g.o.reason[id], "length") == 0) {
                        /* any object: its strings are unbounded, so the cut may come first */
                        ASSERT_EQ(g.o.n_tok[id], 200);
                        ASSERT_TRUE(g.o.text[id][0] == '{');
                        continue;
                }
                if (strcmp(g.o.reason[id], "stop") != 0)
                        fprintf(stderr, "  request %d: %s after '%s'\n", id, g.o.reason[id], g.o.text[id]);
                ASSERT_STREQ(g.o.reason[id], "stop");
                cJSON *v = cJSON_Parse(g.o.text[id]);
                if (!v)
                        fprintf(stderr, "  request %d: not JSON: '%s'\n", id, g.o.text[id]);
                ASSERT_TRUE(v != NULL);
                if (id == 0 || id == 2) {
                        const cJSON *name = cJSON_GetObjectItemCaseSensitive(v, "name");
                        const cJSON *age = cJSON_GetObjectItemCaseSensitive(v, "age");
                        const cJSON *role = cJSON_GetObjectItemCaseSensitive(v, "role");
                        ASSERT_TRUE(cJSON_IsString(name) && cJSON_IsNumber(age) && cJSON_IsString(role));
                        ASSERT_EQ(cJSON_GetArraySize(v), 3);
                        ASSERT_TRUE(age->valuedouble == floor(age->valuedouble));
                        ASSERT_TRUE(strcmp(role->valuestring, "king") == 0 || strcmp(role->valuestring, "prophet") == 0 ||
                                    strcmp(role->valuestring, "priest") == 0);
                } else if (id == 3) {
                        ASSERT_TRUE(cJSON_IsArray(v));
                        ASSERT_TRUE(cJSON_GetArraySize(v) >= 2 && cJSON_GetArraySize(v) <= 4);
                        const cJSON *e;
                        cJSON_ArrayForEach(e, v) ASSERT_TRUE(cJSON_IsBool(e));
                } else {
                        ASSERT_TRUE(cJSON_IsObject(v));
                }
                cJSON_Delete(v);
        }
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_TRUE(st.constrained_tokens > 0);
        ASSERT_TRUE(st.forced_tokens > 0); /* the schema's keys and punctuation */
        ASSERT_TRUE(st.forced_tokens < st.constrained_tokens);
        ASSERT_EQ(st.grammar_compiles, 3); /* person (twice: one compile), list, json_object */
        ASSERT_EQ(st.grammar_cache_hits, 1);
        rig_done(&g);
}

/* A +100 bias on EOS cannot end a constrained output before its grammar accepts, and a
 * max_tokens cut gives "length" with the text as it is (a prefix, not valid JSON). */
TEST(eos_only_where_the_grammar_accepts) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4));
        struct dsv_ipc_logit_bias eos = {dse_tokenizer_eos(tok), 100};
        ASSERT_OK(add(&g, 0, person, 200, 0.8f, &eos, 1, NULL));
        ASSERT_OK(add(&g, 1, person, 5, 0.0f, NULL, 0, NULL));
        ASSERT_OK(run(&g));
        ASSERT_STREQ(g.o.reason[0], "stop");
        cJSON *v = cJSON_Parse(g.o.text[0]);
        ASSERT_TRUE(v != NULL && cJSON_GetArraySize(v) == 3);
        cJSON_Delete(v);
        ASSERT_STREQ(g.o.reason[1], "length");
        ASSERT_EQ(g.o.n_tok[1], 5);
        ASSERT_TRUE(strncmp(g.o.text[1], "{\"name\":\"", strlen(g.o.text[1]) < 9 ? strlen(g.o.text[1]) : 9) == 0);
        v = cJSON_Parse(g.o.text[1]);
        ASSERT_TRUE(v == NULL);
        rig_done(&g);
}

/* A schema that admits one output: every token the mask leaves alone is forced, and the
 * reply is exactly that output. */
TEST(single_allowed_token_is_forced) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 2));
        ASSERT_OK(add(&g, 0, "{\"const\":[\"And\",\"God\"]}", 100, 1.0f, NULL, 0, NULL));
        ASSERT_OK(run(&g));
        ASSERT_STREQ(g.o.reason[0], "stop");
        ASSERT_STREQ(g.o.text[0], "[\"And\",\"God\"]");
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_TRUE(st.forced_tokens > 0);
        ASSERT_TRUE(st.forced_tokens <= st.constrained_tokens);
        rig_done(&g);
}

/* Regex, choice and GBNF constraints through the same path. */
TEST(regex_choice_and_grammar) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4));
        int32_t ids[16];
        int n = dse_tokenizer_encode(tok, "And God said", 12, 1, ids, 16);
        char *choices[] = {"Let there be light", "Amen", "Selah"};
        struct dsv_ipc_request req = {.id = 0, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = 40};
        dsv_ipc_sampling_init(&req.sampling);
        req.sampling.temperature = 1.0f;
        req.sampling.has_seed = 1;
        req.constraint = DSV_IPC_CONSTRAINT_REGEX;
        req.constraint_text = "[A-Z][a-z]{2,6}( [a-z]{1,6}){1,3}\\.";
        ASSERT_OK(sched_add(g.s, &req, ids, (size_t)n, 0));
        req.id = 1;
        req.constraint = DSV_IPC_CONSTRAINT_CHOICE;
        req.constraint_text = NULL;
        req.choices = choices;
        req.n_choices = 3;
        ASSERT_OK(sched_add(g.s, &req, ids, (size_t)n, 0));
        req.id = 2;
        req.constraint = DSV_IPC_CONSTRAINT_GRAMMAR;
        req.constraint_text = "root ::= \"(\" num (\",\" num){0,3} \")\"\nnum ::= [1-9] [0-9]?";
        req.choices = NULL;
        req.n_choices = 0;
        ASSERT_OK(sched_add(g.s, &req, ids, (size_t)n, 0));
        req.id = 3;
        req.constraint_text = "root ::= missing";
        ASSERT_ERR(sched_add(g.s, &req, ids, (size_t)n, 0), -EINVAL);
        ASSERT_TRUE(strstr(g.o.error_msg[3], "missing") != NULL);
        ASSERT_OK(run(&g));
        for (int id = 0; id < 3; id++) {
                if (getenv("DSV_TEST_VERBOSE"))
                        fprintf(stderr, "  %d: %s (%s)\n", id, g.o.text[id], g.o.reason[id]);
                ASSERT_STREQ(g.o.reason[id], "stop");
        }
        /* judged by hand: a capitalised word, 1-3 lower-case words, a full stop */
        const char *t = g.o.text[0];
        ASSERT_TRUE(t[0] >= 'A' && t[0] <= 'Z' && t[strlen(t) - 1] == '.' && strchr(t, ' ') != NULL);
        ASSERT_TRUE(strcmp(g.o.text[1], "Amen") == 0 || strcmp(g.o.text[1], "Selah") == 0 ||
                    strcmp(g.o.text[1], "Let there be light") == 0);
        t = g.o.text[2];
        ASSERT_TRUE(t[0] == '(' && t[strlen(t) - 1] == ')');
        for (const char *p = t + 1; *p != ')'; p++)
                ASSERT_TRUE((*p >= '0' && *p <= '9') || *p == ',');
        rig_done(&g);
}

/* A composed constraint through the real model: a special token admitted by its id (the
 * bundled tokenizer's "<s>" stands in for a tool-call marker: a token with no text of its
 * own), then a name and arguments valid against that name's schema. A special text that
 * is not one token is refused naming the part. */
TEST(composed_with_a_special_token) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 2));
        int32_t ids[16];
        int n = dse_tokenizer_encode(tok, "And God said", 12, 1, ids, 16);
        struct dsv_ipc_request req = {.id = 0, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = 60};
        dsv_ipc_sampling_init(&req.sampling);
        req.sampling.temperature = 1.0f;
        req.sampling.seed = 11;
        req.sampling.has_seed = 1;
        req.constraint = DSV_IPC_CONSTRAINT_COMPOSED;
        req.constraint_text =
                "{\"sequence\":[{\"special\":\"<s>\"},{\"text\":\"call \"},{\"one_of\":["
                "{\"sequence\":[{\"text\":\"add \"},{\"json_schema\":{\"type\":\"array\",\"items\":"
                "{\"type\":\"integer\",\"minimum\":1,\"maximum\":9},\"minItems\":2,\"maxItems\":2}}]},"
                "{\"sequence\":[{\"text\":\"say \"},{\"json_schema\":{\"enum\":[\"light\",\"dark\"]}}]}]}]}";
        if (sched_add(g.s, &req, ids, (size_t)n, 0) < 0)
                T_FAIL("composed constraint refused: %s", g.o.error_msg[0]);
        req.id = 1;
        req.constraint_text = "{\"sequence\":[{\"text\":\"a\"},{\"special\":\"<tool_call>\"}]}";
        ASSERT_ERR(sched_add(g.s, &req, ids, (size_t)n, 0), -EINVAL);
        ASSERT_TRUE(strstr(g.o.error_msg[1], "sequence[1]") && strstr(g.o.error_msg[1], "not one token"));
        ASSERT_OK(run(&g));
        if (getenv("DSV_TEST_VERBOSE"))
                fprintf(stderr, "  %s (%s)\n", g.o.text[0], g.o.reason[0]);
        ASSERT_STREQ(g.o.reason[0], "stop");
        ASSERT_EQ(g.o.first[0], dse_tokenizer_bos(tok));
        /* the text after the special token: one of the two calls, valid */
        const char *t = strstr(g.o.text[0], "call ");
        ASSERT_TRUE(t != NULL);
        int a = 0, b = 0;
        char end = 0;
        ASSERT_TRUE(strcmp(t, "call say \"light\"") == 0 || strcmp(t, "call say \"dark\"") == 0 ||
                    (sscanf(t, "call add [%d,%d%c", &a, &b, &end) == 3 && end == ']' && a >= 1 && a <= 9 && b >= 1 &&
                     b <= 9));
        rig_done(&g);
}

/* Penalties come after the mask: a negative presence/frequency penalty (which raises
 * tokens already seen) and a repetition penalty never revive a masked token. */
TEST(mask_before_penalties) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 2));
        struct dsv_ipc_sampling sp;
        dsv_ipc_sampling_init(&sp);
        sp.presence_penalty = -2;
        sp.frequency_penalty = -2;
        sp.repetition_penalty = 0.05f; /* below 1: favours the prompt's tokens */
        ASSERT_OK(add(&g, 0, "{\"type\":\"integer\"}", 12, 1.0f, NULL, 0, &sp));
        ASSERT_OK(run(&g));
        ASSERT_EQ(g.o.error[0], 0);
        ASSERT_TRUE(g.o.text[0][0] != 0);
        ASSERT_TRUE(digits_only(g.o.text[0][0] == '-' ? g.o.text[0] + 1 : g.o.text[0]));
        rig_done(&g);

        /* the same on logits directly: mask, then penalties */
        float logits[130];
        for (int i = 0; i < 130; i++)
                logits[i] = (float)(i % 7) - 3.0f;
        uint64_t mask[3] = {1ull << 5 | 1ull << 9, 0, 1ull << 1};
        int32_t seen[] = {0, 3, 64, 129};
        struct sampling_scratch sc;
        ASSERT_OK(sampling_scratch_init(&sc, 130));
        struct penalties pen = {0.05f, -2, -2};
        sampling_apply_mask(mask, 130, logits);
        sampling_apply_penalties(&sc, &pen, seen, 0, 4, logits);
        for (int i = 0; i < 130; i++)
                ASSERT_TRUE((i == 5 || i == 9 || i == 129) == !isinf(logits[i]));
        sampling_scratch_done(&sc);
        ASSERT_EQ(sampling_mask_single(mask, 130), -1);
        uint64_t one[3] = {0, 0, 1ull << 1};
        ASSERT_EQ(sampling_mask_single(one, 130), 129);
        uint64_t none[3] = {0, 0, 0};
        ASSERT_EQ(sampling_mask_single(none, 130), -1);
}

/* logit_bias -100 bans a token: greedy decoding picks another first token; a bias out of
 * the vocabulary is refused naming logit_bias. */
TEST(logit_bias_bans) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4));
        ASSERT_OK(add(&g, 0, NULL, 3, 0.0f, NULL, 0, NULL));
        ASSERT_OK(run(&g));
        ASSERT_EQ(g.o.n_tok[0], 3);
        struct dsv_ipc_logit_bias ban = {g.o.first[0], -100};
        ASSERT_OK(add(&g, 1, NULL, 3, 0.0f, &ban, 1, NULL));
        struct dsv_ipc_logit_bias bad = {dse_model_vocab_size(model), 1};
        ASSERT_ERR(add(&g, 2, NULL, 3, 0.0f, &bad, 1, NULL), -EINVAL);
        ASSERT_OK(run(&g));
        ASSERT_TRUE(g.o.first[1] != g.o.first[0]);
        ASSERT_EQ(g.o.error[2], DSV_IPC_ERR_INVALID_REQUEST + 1);
        ASSERT_TRUE(strstr(g.o.error_msg[2], "logit_bias") != NULL);

        float logits[4] = {1, 2, 3, 4};
        struct dsv_ipc_logit_bias b[] = {{3, -100}, {0, 2.5f}};
        sampling_apply_bias(b, 2, logits);
        ASSERT_TRUE(isinf(logits[3]) && logits[3] < 0);
        ASSERT_FLOAT_EQ(logits[0], 3.5f);
        rig_done(&g);
}

/* A keyword the compiler cannot enforce: the request is refused, naming it; the
 * refusal is an error event, nothing is queued. Logprob alternatives carry bytes. */
TEST(refused_schema_and_alternative_bytes) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 2));
        ASSERT_ERR(add(&g, 0, "{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{\"type\":\"null\"}}}}", 10, 0.0f,
                       NULL, 0, NULL),
                   -EOPNOTSUPP);
        ASSERT_EQ(g.o.error[0], DSV_IPC_ERR_INVALID_REQUEST + 1);
        ASSERT_TRUE(strstr(g.o.error_msg[0], "'not'") != NULL);
        ASSERT_TRUE(strstr(g.o.error_msg[0], "/properties/a") != NULL);
        ASSERT_ERR(add(&g, 1, "{\"type\":", 10, 0.0f, NULL, 0, NULL), -EBADMSG);
        ASSERT_EQ(g.o.error[1], DSV_IPC_ERR_INVALID_REQUEST + 1);

        int32_t ids[8];
        int n = dse_tokenizer_encode(tok, "And God", 7, 1, ids, 8);
        struct dsv_ipc_request req = {.id = 2, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = 2, .logprobs = 3};
        dsv_ipc_sampling_init(&req.sampling);
        ASSERT_OK(sched_add(g.s, &req, ids, (size_t)n, 0));
        ASSERT_OK(run(&g));
        ASSERT_EQ(g.o.top_bytes_seen, 2);
        rig_done(&g);
}

/* Fast-forward: the same requests with and without it give the same tokens, texts,
 * logprobs and ends (sampled at temperature, so the random stream must be used alike;
 * one cut by max_tokens and one by a stop string inside a forced run), in fewer
 * forward passes. */
static void fast_forward_run(struct rig *g, int max_run, struct sched_stats *st) {
        ASSERT_OK(rig_init(g, 8));
        ASSERT_OK(sched_set_fast_forward(g->s, max_run));
        int32_t ids[64];
        int n = dse_tokenizer_encode(tok, "And God said", 12, 1, ids, 64);
        ASSERT_TRUE(n > 0);
        char *stop[] = {"\"role\""};
        for (int id = 0; id < 6; id++) {
                struct dsv_ipc_request req = {.id = (uint64_t)id, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = 200};
                dsv_ipc_sampling_init(&req.sampling);
                req.sampling.temperature = 0.9f;
                req.sampling.seed = 11 + (uint64_t)id;
                req.sampling.has_seed = 1;
                req.logprobs = 2;
                req.constraint = DSV_IPC_CONSTRAINT_JSON_SCHEMA;
                req.constraint_text = (char *)(id == 3 ? list : person);
                if (id == 4)
                        req.max_tokens = 7; /* ends inside the forced run of the first key */
                if (id == 5) {
                        req.stop = stop;
                        req.n_stop = 1;
                }
                ASSERT_OK(sched_add(g->s, &req, ids, (size_t)n, 0));
        }
        ASSERT_OK(run(g));
        sched_get_stats(g->s, st);
}

TEST(fast_forward_same_output_fewer_passes) {
        struct rig *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on);
        ASSERT_TRUE(off && on);
        struct sched_stats st_off, st_on;
        fast_forward_run(off, 0, &st_off);
        fast_forward_run(on, 8, &st_on);
        for (int id = 0; id < 6; id++) {
                if (getenv("DSV_TEST_VERBOSE"))
                        fprintf(stderr, "  %d: %s (%s, %d tokens)\n", id, on->o.text[id], on->o.reason[id],
                                on->o.n_tok[id]);
                ASSERT_EQ(on->o.error[id], 0);
                ASSERT_EQ(on->o.n_tok[id], off->o.n_tok[id]);
                ASSERT_STREQ(on->o.text[id], off->o.text[id]);
                ASSERT_STREQ(on->o.reason[id], off->o.reason[id]);
                for (int t = 0; t < on->o.n_tok[id] && t < 256; t++) {
                        ASSERT_EQ(on->o.toks[id][t], off->o.toks[id][t]);
                        ASSERT_FLOAT_EQ(on->o.lp[id][t], off->o.lp[id][t]);
                }
        }
        ASSERT_STREQ(on->o.reason[4], "length");
        ASSERT_EQ(on->o.n_tok[4], 7);
        ASSERT_STREQ(on->o.reason[5], "stop");
        ASSERT_EQ(st_off.fast_forward_tokens, 0);
        ASSERT_TRUE(st_on.fast_forward_tokens > 0);
        ASSERT_EQ(st_on.forced_tokens, st_off.forced_tokens);
        ASSERT_EQ(st_on.constrained_tokens, st_off.constrained_tokens);
        ASSERT_TRUE(st_on.steps < st_off.steps);
        fprintf(stderr, "  forward passes: %lld without fast-forward, %lld with (%lld tokens in forced runs)\n",
                (long long)st_off.steps, (long long)st_on.steps, (long long)st_on.fast_forward_tokens);
        ASSERT_EQ(st_on.kv_blocks_used, 0);
        rig_done(off);
        rig_done(on);
        free(off);
        free(on);
}

TEST(fast_forward_bad_config) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 2));
        ASSERT_ERR(sched_set_fast_forward(g.s, -1), -EINVAL);
        ASSERT_ERR(sched_set_fast_forward(g.s, 9), -EINVAL);
        ASSERT_OK(add(&g, 0, person, 4, 0.0f, NULL, 0, NULL));
        ASSERT_ERR(sched_set_fast_forward(g.s, 4), -EBUSY);
        ASSERT_OK(run(&g));
        rig_done(&g);
}
