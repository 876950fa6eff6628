/* The gateway's embedding API (dsv_gateway.h) without HTTP clients: configuration checks,
 * the instance table (add, duplicate, readiness, links replaced and removed), the up state
 * following a worker's pipe, the listening port and the metrics text. Workers are bare
 * dsv_ipc listeners on inproc:// URLs. */
#include <time.h>
#include <unistd.h>

#include "dsv_gateway.h"
#include "dsv_ipc.h"
#include "t.h"

static struct dsv_gateway *gateway(void) {
        struct dsv_gateway_config cfg;
        dsv_gateway_config_init(&cfg);
        cfg.model = "m";
        struct dsv_gateway *gw = NULL;
        return dsv_gateway_new(&cfg, &gw) == 0 ? gw : NULL;
}

/* Polls up to 2 s for dsv_gateway_instance_is_up(gw, id) == want. */
static int wait_up(struct dsv_gateway *gw, int id, int want) {
        for (int i = 0; i < 200; i++) {
                int r = dsv_gateway_instance_is_up(gw, id);
                if (r == want || r < 0)
                        return r;
                usleep(10000);
        }
        return dsv_gateway_instance_is_up(gw, id);
}

TEST(config_checks) {
        struct dsv_gateway_config cfg;
        struct dsv_gateway *gw;
        dsv_gateway_config_init(&cfg);
        ASSERT_STREQ(cfg.listen_host, "127.0.0.1");
        ASSERT_EQ(cfg.max_body_bytes, 1u << 20);
        ASSERT_ERR(dsv_gateway_new(&cfg, &gw), -EINVAL); /* no model */
        cfg.model = "m";
        cfg.max_tokens_limit = 0;
        ASSERT_ERR(dsv_gateway_new(&cfg, &gw), -EINVAL);
        cfg.max_tokens_limit = 10;
        cfg.api_keys_path = "/nonexistent/keys";
        ASSERT_ERR(dsv_gateway_new(&cfg, &gw), -ENOENT);
        cfg.api_keys_path = NULL;
        cfg.route = DSV_POLICY_ROUTE_COUNT;
        ASSERT_ERR(dsv_gateway_new(&cfg, &gw), -EINVAL);
        dsv_gateway_free(NULL);
}

TEST(instances_follow_their_workers) {
        struct dsv_gateway *gw = gateway();
        ASSERT_TRUE(gw);
        struct dsv_ipc_conn *w0, *w1;
        ASSERT_OK(dsv_ipc_listen("inproc://gw-api-w0", &w0));
        ASSERT_OK(dsv_ipc_listen("inproc://gw-api-w1", &w1));
        struct dsv_gateway_instance_config ic = {.name = "w0", .numa_node = 1, .url = "inproc://gw-api-w0", .ready = true};
        int a = dsv_gateway_instance_add(gw, &ic);
        ASSERT_EQ(a, 0);
        ASSERT_ERR(dsv_gateway_instance_add(gw, &ic), -EEXIST);
        ic.name = "";
        ASSERT_ERR(dsv_gateway_instance_add(gw, &ic), -EINVAL);
        ic.name = "w1";
        ic.url = "inproc://gw-api-w1";
        ic.ready = false;
        int b = dsv_gateway_instance_add(gw, &ic);
        ASSERT_EQ(b, 1);
        ASSERT_EQ(wait_up(gw, a, 1), 1);
        ASSERT_EQ(dsv_gateway_instance_is_up(gw, b), 0); /* connected, not marked ready */
        ASSERT_OK(dsv_gateway_instance_set_ready(gw, b, true));
        ASSERT_EQ(wait_up(gw, b, 1), 1);
        ASSERT_OK(dsv_gateway_instance_set_ready(gw, a, false));
        ASSERT_EQ(dsv_gateway_instance_is_up(gw, a), 0);
        ASSERT_OK(dsv_gateway_instance_set_ready(gw, a, true));

        /* the worker goes away: down; a new one at the same URL: up again, by itself */
        dsv_ipc_close(w0);
        ASSERT_EQ(wait_up(gw, a, 0), 0);
        ASSERT_OK(dsv_ipc_listen("inproc://gw-api-w0", &w0));
        ASSERT_EQ(wait_up(gw, a, 1), 1);

        /* the link replaced with another URL */
        struct dsv_ipc_conn *w2;
        ASSERT_OK(dsv_ipc_listen("inproc://gw-api-w2", &w2));
        ASSERT_OK(dsv_gateway_instance_set_url(gw, b, "inproc://gw-api-w2"));
        ASSERT_EQ(wait_up(gw, b, 1), 1);
        ASSERT_ERR(dsv_gateway_instance_set_url(gw, 7, "inproc://gw-api-w2"), -ENOENT);
        ASSERT_ERR(dsv_gateway_instance_set_url(gw, b, "tcp://1.2.3.4:5"), -EINVAL);

        struct dsv_policy_worker_load load = {.queued_requests = 3, .running_seqs = 2};
        ASSERT_OK(dsv_gateway_instance_set_load(gw, b, &load));
        char *text;
        size_t len;
        ASSERT_OK(dsv_gateway_metrics_render(gw, &text, &len));
        ASSERT_TRUE(strstr(text, "dsvisor_instance_up{instance=\"w0\",numa_node=\"1\",model_name=\"m\"} 1\n") != NULL);
        ASSERT_TRUE(strstr(text, "dsvisor_num_requests_waiting{instance=\"w1\",numa_node=\"1\",model_name=\"m\"} 3\n") != NULL);
        ASSERT_TRUE(strstr(text, "dsvisor_num_requests_running{instance=\"w1\",numa_node=\"1\",model_name=\"m\"} 2\n") != NULL);
        ASSERT_TRUE(strstr(text, "dsvisor_time_to_first_token_seconds_bucket{instance=\"w1\",numa_node=\"1\",model_name=\"m\",le=\"+Inf\"} 0\n") != NULL);
        free(text);
        /* the same figures through the function `dsvisor status` reads */
        struct dsv_gateway_instance_stats st;
        ASSERT_OK(dsv_gateway_instance_stats(gw, b, &st));
        ASSERT_TRUE(st.up);
        ASSERT_EQ(st.waiting, 3);
        ASSERT_EQ(st.running, 2);
        ASSERT_TRUE(st.worker_reported);
        ASSERT_ERR(dsv_gateway_instance_stats(gw, 7, &st), -ENOENT);
        ASSERT_OK(dsv_gateway_instance_set_load(gw, b, NULL));
        ASSERT_OK(dsv_gateway_instance_stats(gw, b, &st));
        ASSERT_EQ(st.waiting, 0);
        ASSERT_EQ(st.running, 0);
        ASSERT_TRUE(!st.worker_reported);

        ASSERT_OK(dsv_gateway_instance_remove(gw, a));
        ASSERT_ERR(dsv_gateway_instance_remove(gw, a), -ENOENT);
        ASSERT_ERR(dsv_gateway_instance_is_up(gw, a), -ENOENT);
        ASSERT_ERR(dsv_gateway_instance_set_ready(gw, a, true), -ENOENT);
        ASSERT_OK(dsv_gateway_metrics_render(gw, &text, &len));
        ASSERT_TRUE(strstr(text, "instance=\"w0\"") == NULL);
        free(text);
        /* the freed slot is reused */
        ic.name = "w0b";
        ic.url = "inproc://gw-api-w0";
        ASSERT_EQ(dsv_gateway_instance_add(gw, &ic), 0);
        dsv_gateway_free(gw);
        dsv_ipc_close(w0);
        dsv_ipc_close(w1);
        dsv_ipc_close(w2);
}

TEST(too_many_instances) {
        struct dsv_gateway *gw = gateway();
        ASSERT_TRUE(gw);
        char name[16];
        for (int i = 0; i < DSV_GATEWAY_MAX_INSTANCES; i++) {
                snprintf(name, sizeof name, "i%d", i);
                struct dsv_gateway_instance_config ic = {.name = name, .url = "inproc://gw-api-none"};
                ASSERT_EQ(dsv_gateway_instance_add(gw, &ic), i);
        }
        struct dsv_gateway_instance_config ic = {.name = "one-more", .url = "inproc://gw-api-none"};
        ASSERT_ERR(dsv_gateway_instance_add(gw, &ic), -ENOSPC);
        dsv_gateway_free(gw);
}

TEST(http_port) {
        struct dsv_gateway_config cfg;
        dsv_gateway_config_init(&cfg);
        cfg.model = "m";
        struct dsv_gateway *gw;
        ASSERT_OK(dsv_gateway_new(&cfg, &gw));
        ASSERT_ERR(dsv_gateway_port(gw), -ENOTCONN);
        ASSERT_OK(dsv_gateway_start(gw));
        int port = dsv_gateway_port(gw);
        ASSERT_TRUE(port > 0);
        ASSERT_ERR(dsv_gateway_start(gw), -EALREADY);
        /* the same port again is taken */
        cfg.port = (uint16_t)port;
        struct dsv_gateway *gw2;
        ASSERT_OK(dsv_gateway_new(&cfg, &gw2));
        ASSERT_TRUE(dsv_gateway_start(gw2) < 0);
        dsv_gateway_free(gw2);
        cfg.port = 0;
        cfg.listen_host = "not-an-address";
        ASSERT_OK(dsv_gateway_new(&cfg, &gw2));
        ASSERT_ERR(dsv_gateway_start(gw2), -EINVAL);
        dsv_gateway_free(gw2);
        dsv_gateway_free(gw);
}
