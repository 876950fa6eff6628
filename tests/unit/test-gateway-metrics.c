/* The metrics room's per-instance families: model_name on every request and engine
 * series, the prefix cache as counters, the phase and length histograms, finish reasons,
 * and with vLLM compatibility the same series under vLLM's names and labels. promtool
 * checks the live page (tests/integration/test-grafana-prometheus.sh). */
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "t.h"

static char *render(struct gw_metrics *m, const struct gw_instance_sample *v, size_t n) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        struct gw_server_sample srv = {.connections_open = 1, .max_connections = 8};
        if (!f || dsv__gw_metrics_write(m, f, v, n, &srv) < 0) {
                if (f)
                        fclose(f);
                free(buf);
                return NULL;
        }
        fclose(f);
        return buf;
}

/* One instance that served two requests: one stopped, one hit its deadline. */
static void fill(struct gw_metrics *m, struct gw_instance_sample *v) {
        *v = (struct gw_instance_sample){
                .slot = 0,
                .gen = 7,
                .stats = {.up = true, .running = 1, .waiting = 2, .worker_reported = true, .kv_blocks_used = 25,
                          .kv_blocks_total = 100, .prefix_hit_rate = 0.4, .prefix_query_tokens = 120,
                          .prefix_hit_tokens = 48, .steps = 3, .step_tokens = 40},
        };
        /* steps of 1, 12 and 27 tokens */
        v->stats.step_tokens_buckets[0] = 1;
        v->stats.step_tokens_buckets[2] = 1;
        v->stats.step_tokens_buckets[3] = 1;
        dsv__gw_metrics_instance_reset(m, 0, 7, "w0", 1);
        dsv__gw_metrics_token(m, 0, 7, true, 0.02);
        dsv__gw_metrics_token(m, 0, 7, false, 0.01);
        struct gw_request_done a = {.e2e_s = 0.2, .queue_s = 0.001, .prefill_s = 0.02, .decode_s = 0.03,
                                    .prompt_tokens = 12, .generation_tokens = 2, .finish_reason = "stop"};
        struct gw_request_done b = {.e2e_s = 3, .queue_s = 0.5, .prefill_s = 1, .decode_s = 1.5,
                                    .prompt_tokens = 300, .generation_tokens = 40, .finish_reason = "deadline"};
        dsv__gw_metrics_complete(m, 0, 7, &a);
        dsv__gw_metrics_complete(m, 0, 7, &b);
}

#define HAS(text, s) ASSERT_TRUE(strstr(text, s) != NULL)
#define LACKS(text, s) ASSERT_TRUE(strstr(text, s) == NULL)

TEST(dsvisor_names_carry_model_name_and_the_new_families) {
        struct gw_metrics m;
        ASSERT_OK(dsv__gw_metrics_init(&m, "deep\"seek", false));
        struct gw_instance_sample v;
        fill(&m, &v);
        char *t = render(&m, &v, 1);
        ASSERT_TRUE(t != NULL);
        char inference_sum[32];
        snprintf(inference_sum, sizeof inference_sum, "%.17g", (0.02 + 0.03) + (1 + 1.5));
        /* name, labels after the instance's, value */
        const char *const want[][3] = {
                {"dsvisor_prefix_cache_queries_total", "", "120"},
                {"dsvisor_prefix_cache_hits_total", "", "48"},
                {"dsvisor_kv_cache_usage_perc", "", "0.25"},
                {"dsvisor_cache_config_info", ",num_blocks=\"100\"", "1"},
                /* 0.02 and 1 s prefill: the first by 0.5 s, both by 1 s */
                {"dsvisor_request_prefill_time_seconds_bucket", ",le=\"0.5\"", "1"},
                {"dsvisor_request_prefill_time_seconds_bucket", ",le=\"1\"", "2"},
                {"dsvisor_request_inference_time_seconds_sum", "", inference_sum},
                {"dsvisor_request_prompt_tokens_bucket", ",le=\"20\"", "1"},
                {"dsvisor_request_generation_tokens_sum", "", "42"},
                {"dsvisor_request_decode_time_seconds_count", "", "2"},
                {"dsvisor_request_success_total", ",finished_reason=\"deadline\"", "1"},
                {"dsvisor_request_success_total", ",finished_reason=\"stop\"", "1"},
                {"dsvisor_prompt_tokens_total", "", "312"},
                {"dsvisor_iteration_tokens_bucket", ",le=\"8\"", "1"},
                {"dsvisor_iteration_tokens_bucket", ",le=\"16\"", "2"},
                {"dsvisor_iteration_tokens_bucket", ",le=\"32\"", "3"},
                {"dsvisor_iteration_tokens_bucket", ",le=\"+Inf\"", "3"},
                {"dsvisor_iteration_tokens_sum", "", "40"},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                char line[512];
                snprintf(line, sizeof line, "%s{instance=\"w0\",numa_node=\"1\",model_name=\"deep\\\"seek\"%s} %s\n",
                         want[i][0], want[i][1], want[i][2]);
                HAS(t, line);
        }
        LACKS(t, "vllm:");
        free(t);
        dsv__gw_metrics_done(&m);
}

TEST(vllm_compat_adds_the_same_series_under_vllm_names) {
        struct gw_metrics m;
        ASSERT_OK(dsv__gw_metrics_init(&m, "ds", true));
        struct gw_instance_sample v;
        fill(&m, &v);
        char *t = render(&m, &v, 1);
        ASSERT_TRUE(t != NULL);
        static const char *const want[] = {
                "dsvisor_num_requests_waiting{instance=\"w0\",numa_node=\"1\",model_name=\"ds\"} 2\n",
                "vllm:num_requests_waiting{model_name=\"ds\",engine=\"w0\"} 2\n",
                "vllm:num_requests_running{model_name=\"ds\",engine=\"w0\"} 1\n",
                "vllm:kv_cache_usage_perc{model_name=\"ds\",engine=\"w0\"} 0.25\n",
                "vllm:prefix_cache_queries_total{model_name=\"ds\",engine=\"w0\"} 120\n",
                "vllm:prefix_cache_hits_total{model_name=\"ds\",engine=\"w0\"} 48\n",
                "vllm:cache_config_info{model_name=\"ds\",engine=\"w0\",num_gpu_blocks=\"100\"} 1\n",
                "vllm:prompt_tokens_total{model_name=\"ds\",engine=\"w0\"} 312\n",
                "vllm:generation_tokens_total{model_name=\"ds\",engine=\"w0\"} 2\n",
                "# TYPE vllm:time_to_first_token_seconds histogram\n",
                "vllm:time_to_first_token_seconds_count{model_name=\"ds\",engine=\"w0\"} 1\n",
                "vllm:inter_token_latency_seconds_count{model_name=\"ds\",engine=\"w0\"} 1\n",
                "vllm:time_per_output_token_seconds_count{model_name=\"ds\",engine=\"w0\"} 1\n",
                "vllm:e2e_request_latency_seconds_count{model_name=\"ds\",engine=\"w0\"} 2\n",
                "vllm:request_queue_time_seconds_count{model_name=\"ds\",engine=\"w0\"} 2\n",
                "vllm:request_prefill_time_seconds_count{model_name=\"ds\",engine=\"w0\"} 2\n",
                "vllm:request_decode_time_seconds_count{model_name=\"ds\",engine=\"w0\"} 2\n",
                "vllm:request_inference_time_seconds_count{model_name=\"ds\",engine=\"w0\"} 2\n",
                "vllm:request_prompt_tokens_count{model_name=\"ds\",engine=\"w0\"} 2\n",
                "vllm:request_generation_tokens_count{model_name=\"ds\",engine=\"w0\"} 2\n",
                "vllm:iteration_tokens_total_count{model_name=\"ds\",engine=\"w0\"} 3\n",
                /* vLLM's reasons: a deadline is an abort */
                "vllm:request_success_total{model_name=\"ds\",engine=\"w0\",finished_reason=\"abort\"} 1\n",
                "vllm:request_success_total{model_name=\"ds\",engine=\"w0\",finished_reason=\"stop\"} 1\n",
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
                HAS(t, want[i]);
        LACKS(t, "vllm:request_success_total{model_name=\"ds\",engine=\"w0\",finished_reason=\"deadline\"");
        free(t);
        dsv__gw_metrics_done(&m);
}

TEST(a_model_id_that_cannot_be_a_label_is_refused) {
        struct gw_metrics m;
        char long_id[GW_MODEL_LABEL_MAX + 8];
        memset(long_id, 'a', sizeof long_id - 1);
        long_id[sizeof long_id - 1] = 0;
        ASSERT_ERR(dsv__gw_metrics_init(&m, long_id, false), -EINVAL);
        ASSERT_ERR(dsv__gw_metrics_init(&m, NULL, false), -EINVAL);
}

/* An instance with a KV disk tier gets its series (hits split by tier); one without gets
 * none of them. */
TEST(kv_disk_tier_series_only_for_instances_with_one) {
        struct gw_metrics m;
        ASSERT_OK(dsv__gw_metrics_init(&m, "ds", false));
        struct gw_instance_sample v;
        fill(&m, &v);
        char *t = render(&m, &v, 1);
        ASSERT_TRUE(t != NULL);
        LACKS(t, "dsvisor_kv_disk_bytes_used{");
        LACKS(t, "dsvisor_prefix_cache_disk_hits_total{");
        free(t);
        v.stats.kv_disk_bytes_capacity = 1 << 30;
        v.stats.kv_disk_bytes_used = 1 << 20;
        v.stats.kv_disk_blocks_written = 9;
        v.stats.kv_disk_blocks_read = 2;
        v.stats.kv_disk_blocks_dropped = 1;
        v.stats.prefix_disk_hit_tokens = 32;
        t = render(&m, &v, 1);
        ASSERT_TRUE(t != NULL);
        static const char *const want[][2] = {
                {"dsvisor_prefix_cache_ram_hits_total", "16"},    {"dsvisor_prefix_cache_disk_hits_total", "32"},
                {"dsvisor_kv_disk_bytes_used", "1048576"},        {"dsvisor_kv_disk_bytes_capacity", "1073741824"},
                {"dsvisor_kv_disk_blocks_written_total", "9"},    {"dsvisor_kv_disk_blocks_read_total", "2"},
                {"dsvisor_kv_disk_blocks_dropped_total", "1"},    {"dsvisor_kv_disk_blocks_corrupt_total", "0"},
                {"dsvisor_kv_disk_up", "1"},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                char line[512];
                snprintf(line, sizeof line, "%s{instance=\"w0\",numa_node=\"1\",model_name=\"ds\"} %s\n", want[i][0],
                         want[i][1]);
                HAS(t, line);
        }
        free(t);
        v.stats.kv_disk_failed = true;
        t = render(&m, &v, 1);
        ASSERT_TRUE(t != NULL);
        HAS(t, "dsvisor_kv_disk_up{instance=\"w0\",numa_node=\"1\",model_name=\"ds\"} 0\n");
        free(t);
        dsv__gw_metrics_done(&m);
}
