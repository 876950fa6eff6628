/* The gateway's serving options without a client: CORS origin lists and their answers'
 * header values (cors.c), keys given in memory beside a file (keys.c), TLS material
 * checks (tls.c), the model list with aliases and max_model_len (response.c), the
 * request defaults (max_tokens up to the context, served-name aliases) and the config
 * checks of dsv_gateway_new. */
#include <cjson/cJSON.h>
#include <unistd.h>

#include "cors.h"
#include "dsv_gateway.h"
#include "keys.h"
#include "openai.h"
#include "t.h"
#include "tls.h"

TEST(cors_origin_lists) {
        struct gw_cors c;
        ASSERT_OK(dsv__gw_cors_init(&c, NULL));
        ASSERT_TRUE(!c.on && dsv__gw_cors_allow(&c, "https://a.example") == NULL);
        ASSERT_OK(dsv__gw_cors_init(&c, "*"));
        ASSERT_STREQ(dsv__gw_cors_allow(&c, "https://a.example"), "*");
        ASSERT_TRUE(dsv__gw_cors_allow(&c, NULL) == NULL);
        dsv__gw_cors_done(&c);
        ASSERT_OK(dsv__gw_cors_init(&c, "https://a.example, http://localhost:3000"));
        ASSERT_EQ(c.n, 2);
        ASSERT_STREQ(dsv__gw_cors_allow(&c, "http://localhost:3000"), "http://localhost:3000");
        ASSERT_TRUE(dsv__gw_cors_allow(&c, "http://localhost:3001") == NULL);
        ASSERT_TRUE(dsv__gw_cors_allow(&c, "https://a.example/") == NULL);
        dsv__gw_cors_done(&c);
        static const char *const bad[] = {"", "https://a.example,", "a.example", "https://a.example/path",
                                          "https://", "https://a b"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                ASSERT_ERR(dsv__gw_cors_init(&c, bad[i]), -EINVAL);
}

TEST(keys_in_memory_beside_a_file) {
        struct dsv_gw_keys k = {0};
        ASSERT_OK(dsv__gw_keys_add(&k, "sk-a"));
        ASSERT_ERR(dsv__gw_keys_add(&k, ""), -EINVAL);
        char big[600];
        memset(big, 'x', sizeof big - 1);
        big[sizeof big - 1] = 0;
        ASSERT_ERR(dsv__gw_keys_add(&k, big), -EINVAL);
        ASSERT_EQ(dsv__gw_keys_check(&k, "Bearer sk-a"), 1);
        ASSERT_EQ(dsv__gw_keys_check(&k, "Bearer sk-b"), 0);
        dsv__gw_keys_done(&k);
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");
        fputs(text, f);
        fclose(f);
}

TEST(tls_material_is_checked) {
        struct gw_tls t;
        ASSERT_OK(dsv__gw_tls_load(NULL, NULL, &t));
        ASSERT_TRUE(t.cert_pem == NULL);
        ASSERT_ERR(dsv__gw_tls_load("/c.pem", NULL, &t), -EINVAL);
        char cert[] = "/tmp/test-gateway-cert-XXXXXX", key[] = "/tmp/test-gateway-key-XXXXXX";
        close(mkstemp(cert));
        close(mkstemp(key));
        write_file(cert, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
        write_file(key, "not a key\n");
        ASSERT_ERR(dsv__gw_tls_load(cert, key, &t), -EINVAL);
        write_file(key, "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n");
        ASSERT_OK(dsv__gw_tls_load(cert, key, &t));
        ASSERT_TRUE(strstr(t.key_pem, "PRIVATE KEY") != NULL);
        dsv__gw_tls_done(&t);
        ASSERT_ERR(dsv__gw_tls_load(cert, "/nonexistent/key.pem", &t), -ENOENT);
        unlink(cert);
        unlink(key);
}

TEST(models_list_names_and_context) {
        const char *aliases[] = {"deepseek-r1"};
        cJSON *o = dsv__gw_models_object("ds", aliases, 1, 4096);
        char *s = cJSON_PrintUnformatted(o);
        ASSERT_STREQ(s, "{\"object\":\"list\",\"data\":[{\"id\":\"ds\",\"object\":\"model\",\"created\":0,\"owned_by\":"
                        "\"dsvisor\",\"root\":\"ds\",\"max_model_len\":4096},{\"id\":\"deepseek-r1\",\"object\":"
                        "\"model\",\"created\":0,\"owned_by\":\"dsvisor\",\"root\":\"ds\",\"max_model_len\":4096}]}");
        cJSON_free(s);
        cJSON_Delete(o);
}

TEST(request_defaults_and_aliases) {
        const char *aliases[] = {"deepseek-r1"};
        struct dsv_gw_limits lim = {.model = "ds", .model_aliases = aliases, .n_model_aliases = 1,
                                    .max_prompt_bytes = 4096, .max_tokens_limit = 1000, .default_max_tokens = 0};
        struct dsv_gw_request q;
        struct dsv_gw_error e;
        static const char body[] = "{\"model\":\"deepseek-r1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
        ASSERT_OK(dsv__gw_request_parse(body, sizeof body - 1, DSV_GW_API_CHAT, &lim, &q, &e));
        ASSERT_TRUE(q.ipc.u.request.max_tokens_to_context);
        dsv__gw_request_done(&q);
        static const char given[] = "{\"model\":\"ds\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
        ASSERT_OK(dsv__gw_request_parse(given, sizeof given - 1, DSV_GW_API_CHAT, &lim, &q, &e));
        ASSERT_TRUE(!q.ipc.u.request.max_tokens_to_context);
        ASSERT_EQ(q.ipc.u.request.max_tokens, 5);
        dsv__gw_request_done(&q);
        lim.default_max_tokens = 9;
        ASSERT_OK(dsv__gw_request_parse(body, sizeof body - 1, DSV_GW_API_CHAT, &lim, &q, &e));
        ASSERT_TRUE(!q.ipc.u.request.max_tokens_to_context);
        ASSERT_EQ(q.ipc.u.request.max_tokens, 9);
        dsv__gw_request_done(&q);
        static const char other[] = "{\"model\":\"gpt-4\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
        ASSERT_ERR(dsv__gw_request_parse(other, sizeof other - 1, DSV_GW_API_CHAT, &lim, &q, &e), -EINVAL);
        ASSERT_EQ(e.status, 404);
}

TEST(gateway_config_checks) {
        struct dsv_gateway_config cfg;
        struct dsv_gateway *gw;
        dsv_gateway_config_init(&cfg);
        ASSERT_EQ(cfg.request_timeout_ms, 0);
        ASSERT_EQ(cfg.default_max_tokens, 0);
        cfg.model = "m";
        cfg.cors_origins = "not-an-origin";
        ASSERT_ERR(dsv_gateway_new(&cfg, &gw), -EINVAL);
        cfg.cors_origins = NULL;
        cfg.tls_cert_path = "/nonexistent/cert.pem";
        ASSERT_ERR(dsv_gateway_new(&cfg, &gw), -EINVAL); /* no key with it */
        cfg.tls_cert_path = NULL;
        const char *empty[] = {""};
        cfg.model_aliases = empty;
        cfg.n_model_aliases = 1;
        ASSERT_ERR(dsv_gateway_new(&cfg, &gw), -EINVAL);
        cfg.n_model_aliases = 0;
        const char *keys[] = {"sk-1"};
        cfg.api_keys = keys;
        cfg.n_api_keys = 1;
        ASSERT_OK(dsv_gateway_new(&cfg, &gw));
        dsv_gateway_free(gw);
}
