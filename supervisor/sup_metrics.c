/* sup_metrics.c — the supervisor's own Prometheus families on the gateway's /metrics:
 * worker restarts and scheduling, cgroup limits in effect and CPU throttling, weight
 * pages per node, the per-instance perf counters and output drift; and its part of the status page's
 * GET /status. The main thread renders them (each second, and when an instance becomes
 * ready); a gateway thread serves the copy. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "sup.h"

void sup_metrics_init(struct sup_metrics *m) {
        pthread_mutex_init(&m->lock, NULL);
        m->text = NULL;
        m->status = NULL;
}

void sup_metrics_done(struct sup_metrics *m) {
        free(m->text);
        free(m->status);
        m->text = m->status = NULL;
        pthread_mutex_destroy(&m->lock);
}

static void render_workers(FILE *f, const struct sup *s) {
        fprintf(f, "# HELP dsvisor_worker_restarts_total Worker restarts (crashes and reloads).\n"
                   "# TYPE dsvisor_worker_restarts_total counter\n");
        for (int i = 0; i < s->n; i++)
                fprintf(f, "dsvisor_worker_restarts_total{instance=\"%s\",numa_node=\"%d\"} %d\n", s->inst[i].name,
                        s->inst[i].node_os, s->inst[i].restarts);
        fprintf(f, "# HELP dsvisor_worker_sched_fifo 1 when the instance's compute threads run SCHED_FIFO.\n"
                   "# TYPE dsvisor_worker_sched_fifo gauge\n");
        for (int i = 0; i < s->n; i++)
                fprintf(f, "dsvisor_worker_sched_fifo{instance=\"%s\",numa_node=\"%d\"} %d\n", s->inst[i].name,
                        s->inst[i].node_os, s->inst[i].rt_applied ? 1 : 0);
        fprintf(f, "# HELP dsvisor_worker_sched_fifo_fallbacks_total SCHED_FIFO requests refused (kept SCHED_OTHER).\n"
                   "# TYPE dsvisor_worker_sched_fifo_fallbacks_total counter\n"
                   "dsvisor_worker_sched_fifo_fallbacks_total %" PRIu64 "\n",
                sup_instances_rt_fallbacks(s->inst, s->n));
}

static void render_cgroup_limits(FILE *f, const struct sup *s) {
        fprintf(f, "# HELP dsvisor_cgroup_limit_in_effect 1 when a requested cgroup limit is in effect, 0 when not.\n"
                   "# TYPE dsvisor_cgroup_limit_in_effect gauge\n");
        for (int i = 0; i < s->n; i++)
                for (int l = 0; l < DSV_CGROUP_LIMIT_COUNT; l++)
                        if (s->inst[i].cg_report.e[l].requested)
                                fprintf(f, "dsvisor_cgroup_limit_in_effect{instance=\"%s\",limit=\"%s\"} %d\n",
                                        s->inst[i].name, dsv_cgroup_limit_to_string(l),
                                        s->inst[i].cg_report.e[l].applied ? 1 : 0);
}

/* CPU throttling where the cpu controller is in use for the instance; absent on hosts
 * without it. */
static void render_cpu_throttling(FILE *f, const struct sup *s) {
        struct dsv_cgroup_cpu_stat st[SUP_MAX_INSTANCES];
        bool have[SUP_MAX_INSTANCES] = {0}, any = false;
        for (int i = 0; i < s->n; i++) {
                have[i] = s->inst[i].cg && dsv_cgroup_instance_cpu_stat(s->inst[i].cg, &st[i]) == 0;
                any |= have[i];
        }
        if (!any)
                return;
        fprintf(f, "# HELP dsvisor_cgroup_cpu_throttled_periods_total CFS periods in which the instance's cgroup was throttled.\n"
                   "# TYPE dsvisor_cgroup_cpu_throttled_periods_total counter\n");
        for (int i = 0; i < s->n; i++)
                if (have[i])
                        fprintf(f, "dsvisor_cgroup_cpu_throttled_periods_total{instance=\"%s\",numa_node=\"%d\"} %" PRIu64 "\n",
                                s->inst[i].name, s->inst[i].node_os, st[i].throttled_periods);
        fprintf(f, "# HELP dsvisor_cgroup_cpu_throttled_seconds_total Time the instance's cgroup spent throttled.\n"
                   "# TYPE dsvisor_cgroup_cpu_throttled_seconds_total counter\n");
        for (int i = 0; i < s->n; i++)
                if (have[i])
                        fprintf(f, "dsvisor_cgroup_cpu_throttled_seconds_total{instance=\"%s\",numa_node=\"%d\"} %.9f\n",
                                s->inst[i].name, s->inst[i].node_os, st[i].throttled_seconds);
}

/* Each instance's output against its peers' (drift_watch.c), once its window and theirs
 * hold enough sampled tokens. */
static void render_drift(FILE *f, const struct sup *s) {
        static const struct {
                const char *name, *help;
        } fams[] = {
                {"dsvisor_instance_output_drift_ks",
                 "Two-sample Kolmogorov-Smirnov statistic between the instance's output confidence (sampled token "
                 "probability, or entropy) over the last minute and its peers' pooled."},
                {"dsvisor_instance_output_drift_pvalue",
                 "Asymptotic p-value of dsvisor_instance_output_drift_ks, the requests being the sample sizes: below 0.01, the instance's output drifts."},
        };
        for (int k = 0; k < 2; k++) {
                fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", fams[k].name, fams[k].help, fams[k].name);
                for (int i = 0; i < s->n; i++) {
                        const struct sup_drift_verdict *v = &s->drift_verdict[i];
                        for (int g = 0; v->valid && g < SUP_DRIFT_SIGNAL_COUNT; g++)
                                fprintf(f, "%s{instance=\"%s\",numa_node=\"%d\",signal=\"%s\"} %.9g\n", fams[k].name,
                                        s->inst[i].name, s->inst[i].node_os, sup_drift_signal_to_string(g),
                                        k == 0 ? v->ks[g] : v->pvalue[g]);
                }
        }
        fprintf(f, "# HELP dsvisor_instance_output_drift_window_tokens Sampled tokens in the instance's drift window (the last minute).\n"
                   "# TYPE dsvisor_instance_output_drift_window_tokens gauge\n");
        for (int i = 0; i < s->n; i++)
                fprintf(f, "dsvisor_instance_output_drift_window_tokens{instance=\"%s\",numa_node=\"%d\"} %" PRId64 "\n",
                        s->inst[i].name, s->inst[i].node_os, s->drift_verdict[i].n);
}

static void render_weights(FILE *f, const struct sup_weight_set *set) {
        fprintf(f, "# HELP dsvisor_weights_hugepages_bytes Weight image bytes backed by 2 MiB HugePages, per node.\n"
                   "# TYPE dsvisor_weights_hugepages_bytes gauge\n");
        for (int k = 0; k < set->n; k++)
                fprintf(f, "dsvisor_weights_hugepages_bytes{numa_node=\"%d\"} %zu\n", set->w[k].node_os,
                        set->w[k].img.hugetlb ? set->w[k].img.size_bytes : (size_t)0);
        fprintf(f, "# HELP dsvisor_weights_thp_bytes Weight image bytes in transparent 2 MiB pages of shmem when loaded, per node.\n"
                   "# TYPE dsvisor_weights_thp_bytes gauge\n");
        for (int k = 0; k < set->n; k++)
                fprintf(f, "dsvisor_weights_thp_bytes{numa_node=\"%d\"} %zu\n", set->w[k].node_os,
                        set->w[k].img.thp_bytes);
}

static void render_perf(FILE *f, const struct sup *s) {
        struct dsv_perfctr_series series[SUP_MAX_INSTANCES];
        int ns = 0;
        for (int i = 0; i < s->n; i++)
                if (s->inst[i].perf && s->inst[i].perf_prev_valid)
                        series[ns++] = (struct dsv_perfctr_series){.instance = s->inst[i].name,
                                                                   .numa_node = s->inst[i].node_os,
                                                                   .sample = &s->inst[i].perf_prev};
        if (ns == 0)
                return;
        char pbuf[16384];
        int n = dsv_perfctr_format_prometheus(series, (size_t)ns, pbuf, sizeof pbuf);
        if (n > 0 && (size_t)n < sizeof pbuf)
                fputs(pbuf, f);
}

void sup_metrics_refresh(struct sup_metrics *m, const struct sup *s) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return;
        render_workers(f, s);
        render_cgroup_limits(f, s);
        render_weights(f, &s->weights);
        render_cpu_throttling(f, s);
        render_perf(f, s);
        render_drift(f, s);
        if (fclose(f) != 0) {
                free(buf);
                return;
        }
        char *status = sup_status_page_json(s);
        pthread_mutex_lock(&m->lock);
        free(m->text);
        m->text = buf;
        if (status) {
                free(m->status);
                m->status = status;
        }
        pthread_mutex_unlock(&m->lock);
}

int sup_metrics_hook(FILE *out, void *userdata) {
        struct sup_metrics *m = userdata;
        pthread_mutex_lock(&m->lock);
        if (m->text)
                fputs(m->text, out);
        pthread_mutex_unlock(&m->lock);
        return 0;
}

int sup_status_page_hook(FILE *out, void *userdata) {
        struct sup_metrics *m = userdata;
        pthread_mutex_lock(&m->lock);
        int r = m->status ? 0 : -ENODATA;
        if (m->status)
                fputs(m->status, out);
        pthread_mutex_unlock(&m->lock);
        return r;
}
