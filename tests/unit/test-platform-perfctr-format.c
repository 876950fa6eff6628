/* Per-second rates and the Prometheus rendering of perf counter samples, on
 * synthetic samples: no kernel involved. */
#include "dsv_platform.h"
#include "t.h"

#define BIT(ev) (1u << (ev))

static struct dsv_perfctr_sample sample(uint64_t time_ns, unsigned valid) {
        struct dsv_perfctr_sample s;
        memset(&s, 0, sizeof s);
        s.time_ns = time_ns;
        s.valid = valid;
        return s;
}

TEST(rates_over_an_interval) {
        unsigned sw = BIT(DSV_PERF_TASK_CLOCK) | BIT(DSV_PERF_CTXSW_INVOLUNTARY) | BIT(DSV_PERF_CPU_MIGRATIONS);
        struct dsv_perfctr_sample a = sample(10000000000ull, sw), b = sample(12000000000ull, sw); /* 2 s apart */
        a.value[DSV_PERF_CTXSW_INVOLUNTARY] = 100;
        b.value[DSV_PERF_CTXSW_INVOLUNTARY] = 700;
        a.value[DSV_PERF_CPU_MIGRATIONS] = 5;
        b.value[DSV_PERF_CPU_MIGRATIONS] = 6;
        a.value[DSV_PERF_TASK_CLOCK] = 1000000000ull;
        b.value[DSV_PERF_TASK_CLOCK] = 7000000000ull; /* 6 CPU-seconds in 2 s: 3 CPUs busy */
        struct dsv_perfctr_rates r;
        ASSERT_OK(dsv_perfctr_rates_compute(&a, &b, &r));
        ASSERT_NEAR(r.interval_s, 2.0, 1e-12);
        ASSERT_NEAR(r.per_s[DSV_PERF_CTXSW_INVOLUNTARY], 300.0, 1e-9);
        ASSERT_NEAR(r.per_s[DSV_PERF_CPU_MIGRATIONS], 0.5, 1e-12);
        ASSERT_NEAR(r.per_s[DSV_PERF_TASK_CLOCK], 3.0, 1e-12);
        ASSERT_EQ(r.valid, sw);
}

TEST(rates_leave_out_what_was_not_counted_twice) {
        struct dsv_perfctr_sample a = sample(1000, BIT(DSV_PERF_PAGE_FAULTS) | BIT(DSV_PERF_CYCLES));
        struct dsv_perfctr_sample b = sample(1000001000, BIT(DSV_PERF_PAGE_FAULTS) | BIT(DSV_PERF_CTXSW_VOLUNTARY));
        a.value[DSV_PERF_PAGE_FAULTS] = 10;
        b.value[DSV_PERF_PAGE_FAULTS] = 4; /* went backwards: a restarted counter set */
        b.value[DSV_PERF_CTXSW_VOLUNTARY] = 50;
        struct dsv_perfctr_rates r;
        ASSERT_OK(dsv_perfctr_rates_compute(&a, &b, &r));
        ASSERT_EQ(r.valid, 0); /* faults decreased; cycles and voluntary valid in one sample only */
        ASSERT_FLOAT_EQ(r.per_s[DSV_PERF_PAGE_FAULTS], 0.0);
}

TEST(rates_need_a_later_sample) {
        struct dsv_perfctr_sample a = sample(5000, 0), b = sample(5000, 0);
        struct dsv_perfctr_rates r;
        ASSERT_ERR(dsv_perfctr_rates_compute(&a, &b, &r), -EINVAL);
        b.time_ns = 4000;
        ASSERT_ERR(dsv_perfctr_rates_compute(&a, &b, &r), -EINVAL);
        ASSERT_ERR(dsv_perfctr_rates_compute(NULL, &b, &r), -EINVAL);
}

TEST(prometheus_two_instances) {
        struct dsv_perfctr_sample a = sample(1, BIT(DSV_PERF_TASK_CLOCK) | BIT(DSV_PERF_CTXSW_INVOLUNTARY));
        struct dsv_perfctr_sample b = sample(1, BIT(DSV_PERF_TASK_CLOCK) | BIT(DSV_PERF_CTXSW_INVOLUNTARY) |
                                                        BIT(DSV_PERF_CYCLES));
        a.value[DSV_PERF_TASK_CLOCK] = 1500000001ull;
        a.value[DSV_PERF_CTXSW_INVOLUNTARY] = 42;
        a.value[DSV_PERF_CYCLES] = 999; /* not valid in a: must not appear */
        b.value[DSV_PERF_TASK_CLOCK] = 25ull;
        b.value[DSV_PERF_CTXSW_INVOLUNTARY] = 7;
        b.value[DSV_PERF_CYCLES] = 123456789012ull;
        struct dsv_perfctr_series s[2] = {{"0", 0, &a}, {"1", 1, &b}};
        char buf[4096];
        int n = dsv_perfctr_format_prometheus(s, 2, buf, sizeof buf);
        ASSERT_OK(n);
        const char *want =
                "# HELP dsvisor_perf_task_clock_seconds_total CPU time the instance's threads ran (perf task-clock).\n"
                "# TYPE dsvisor_perf_task_clock_seconds_total counter\n"
                "dsvisor_perf_task_clock_seconds_total{instance=\"0\",numa_node=\"0\"} 1.500000001\n"
                "dsvisor_perf_task_clock_seconds_total{instance=\"1\",numa_node=\"1\"} 0.000000025\n"
                "# HELP dsvisor_perf_involuntary_context_switches_total Context switches where a runnable instance "
                "thread was preempted: interference.\n"
                "# TYPE dsvisor_perf_involuntary_context_switches_total counter\n"
                "dsvisor_perf_involuntary_context_switches_total{instance=\"0\",numa_node=\"0\"} 42\n"
                "dsvisor_perf_involuntary_context_switches_total{instance=\"1\",numa_node=\"1\"} 7\n"
                "# HELP dsvisor_perf_cycles_total CPU cycles of the instance's threads (PMU).\n"
                "# TYPE dsvisor_perf_cycles_total counter\n"
                "dsvisor_perf_cycles_total{instance=\"1\",numa_node=\"1\"} 123456789012\n";
        ASSERT_STREQ(buf, want);
        ASSERT_EQ(n, (long long)strlen(want));
}

TEST(prometheus_omits_events_valid_nowhere) {
        struct dsv_perfctr_sample a = sample(1, BIT(DSV_PERF_PAGE_FAULTS));
        a.value[DSV_PERF_PAGE_FAULTS] = 3;
        a.value[DSV_PERF_DTLB_LOAD_MISSES] = 77;
        struct dsv_perfctr_series s = {"w", 2, &a};
        char buf[1024];
        ASSERT_OK(dsv_perfctr_format_prometheus(&s, 1, buf, sizeof buf));
        ASSERT_TRUE(strstr(buf, "dsvisor_perf_page_faults_total{instance=\"w\",numa_node=\"2\"} 3\n") != NULL);
        ASSERT_TRUE(strstr(buf, "dtlb") == NULL);
        ASSERT_TRUE(strstr(buf, "task_clock") == NULL);
        /* nothing valid at all: empty output */
        a.valid = 0;
        ASSERT_EQ(dsv_perfctr_format_prometheus(&s, 1, buf, sizeof buf), 0);
        ASSERT_STREQ(buf, "");
}

TEST(prometheus_escapes_label_values) {
        struct dsv_perfctr_sample a = sample(1, BIT(DSV_PERF_CPU_MIGRATIONS));
        a.value[DSV_PERF_CPU_MIGRATIONS] = 9;
        struct dsv_perfctr_series s = {"a\"b\\c\nd", 0, &a};
        char buf[1024];
        ASSERT_OK(dsv_perfctr_format_prometheus(&s, 1, buf, sizeof buf));
        ASSERT_TRUE(strstr(buf, "{instance=\"a\\\"b\\\\c\\nd\",numa_node=\"0\"} 9\n") != NULL);
}

TEST(prometheus_reports_the_length_it_needs) {
        struct dsv_perfctr_sample a = sample(1, BIT(DSV_PERF_CONTEXT_SWITCHES));
        a.value[DSV_PERF_CONTEXT_SWITCHES] = 12345;
        struct dsv_perfctr_series s = {"0", 0, &a};
        int need = dsv_perfctr_format_prometheus(&s, 1, NULL, 0);
        ASSERT_TRUE(need > 50);
        char small[20], full[512];
        ASSERT_EQ(dsv_perfctr_format_prometheus(&s, 1, small, sizeof small), need);
        ASSERT_EQ(strlen(small), sizeof small - 1); /* truncated, terminated */
        ASSERT_EQ(dsv_perfctr_format_prometheus(&s, 1, full, sizeof full), need);
        ASSERT_EQ(strncmp(small, full, sizeof small - 1), 0);
        struct dsv_perfctr_series bad = {NULL, 0, &a};
        ASSERT_ERR(dsv_perfctr_format_prometheus(&bad, 1, full, sizeof full), -EINVAL);
}

TEST(event_names) {
        ASSERT_STREQ(dsv_perf_event_to_string(DSV_PERF_CTXSW_INVOLUNTARY), "involuntary_context_switches");
        ASSERT_STREQ(dsv_perf_event_to_string(DSV_PERF_DTLB_LOAD_MISSES), "dtlb_load_misses");
        ASSERT_STREQ(dsv_perf_event_to_string(DSV_PERF_EVENT_COUNT), "invalid");
}
