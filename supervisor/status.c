/* status.c — the running supervisor's state as one JSON object: the reply to
 * {"cmd":"status"} on the control socket, which `dsvisor status` prints. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <unistd.h>

#include "dsv_gateway.h"
#include "sup.h"

static void add_weights(cJSON *root, const struct sup_weight_set *set) {
        cJSON *ws = cJSON_AddArrayToObject(root, "weights");
        for (int k = 0; k < set->n; k++) {
                const struct sup_weights *w = &set->w[k];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "numa_node", w->node_os);
                cJSON_AddNumberToObject(o, "bytes", (double)w->img.size_bytes);
                cJSON_AddBoolToObject(o, "hugepages", w->img.hugetlb);
                cJSON_AddNumberToObject(o, "thp_bytes", (double)w->img.thp_bytes);
                cJSON_AddBoolToObject(o, "from_fd_store", w->from_store);
                cJSON_AddStringToObject(o, "note", w->img.note);
                cJSON_AddItemToArray(ws, o);
        }
}

static void add_gateway(cJSON *root, struct dsv_gateway *gw) {
        struct dsv_gateway_stats gst;
        if (!gw || dsv_gateway_stats(gw, &gst) < 0)
                return;
        cJSON *g = cJSON_AddObjectToObject(root, "gateway");
        cJSON *rej = cJSON_AddObjectToObject(g, "rejected");
        for (int i = 0; i < DSV_GATEWAY_REJECT_COUNT; i++)
                cJSON_AddNumberToObject(rej, dsv_gateway_reject_to_string(i), (double)gst.rejected[i]);
        cJSON_AddNumberToObject(g, "connections_refused", (double)gst.connections_refused);
        cJSON_AddNumberToObject(g, "connections_open", gst.connections_open);
        cJSON_AddNumberToObject(g, "max_connections", gst.max_connections);
        cJSON_AddNumberToObject(g, "queue_length", gst.queue_length);
        cJSON_AddNumberToObject(g, "http_rt_priority", gst.http_rt_priority);
}

/* The instance's output against its peers': {"tokens", "peer_tokens", "requests",
 * "peer_requests", and per signal
 * {"ks", "pvalue"}, null while either side has too few sampled tokens}. */
static void add_drift(cJSON *o, const struct sup_drift_verdict *v) {
        if (!v->valid) {
                cJSON *d = cJSON_AddObjectToObject(o, "drift");
                cJSON_AddNumberToObject(d, "tokens", (double)v->n);
                cJSON_AddNumberToObject(d, "peer_tokens", (double)v->m);
        cJSON_AddNumberToObject(d, "requests", (double)v->n_requests);
        cJSON_AddNumberToObject(d, "peer_requests", (double)v->m_requests);
                cJSON_AddNullToObject(d, "token_prob");
                cJSON_AddNullToObject(d, "entropy");
                return;
        }
        cJSON *d = cJSON_AddObjectToObject(o, "drift");
        cJSON_AddNumberToObject(d, "tokens", (double)v->n);
        cJSON_AddNumberToObject(d, "peer_tokens", (double)v->m);
        cJSON_AddNumberToObject(d, "requests", (double)v->n_requests);
        cJSON_AddNumberToObject(d, "peer_requests", (double)v->m_requests);
        for (int g = 0; g < SUP_DRIFT_SIGNAL_COUNT; g++) {
                cJSON *sg = cJSON_AddObjectToObject(d, sup_drift_signal_to_string(g));
                cJSON_AddNumberToObject(sg, "ks", v->ks[g]);
                cJSON_AddNumberToObject(sg, "pvalue", v->pvalue[g]);
        }
}

/* An instance; for_page: what the gateway's status page shows (GET /status, open to
 * whoever may read /metrics): no pid, cgroup path or file names. */
static cJSON *instance_json(const struct sup_instance *in, const struct sup_drift_verdict *drift,
                            struct dsv_gateway *gw, int64_t now, bool for_page) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", in->name);
        if (!for_page)
                cJSON_AddNumberToObject(o, "pid", in->pid);
        cJSON_AddStringToObject(o, "state", sup_state_to_string(in->state));
        cJSON_AddNumberToObject(o, "numa_node", in->node_os);
        cJSON_AddStringToObject(o, "cpus", in->cpus);
        cJSON_AddNumberToObject(o, "threads", in->n_threads);
        if (!for_page)
                cJSON_AddStringToObject(o, "cgroup", in->cg_path);
        cJSON *lims = cJSON_AddArrayToObject(o, "limits");
        for (int l = 0; l < DSV_CGROUP_LIMIT_COUNT; l++) {
                const struct dsv_cgroup_report_entry *e = &in->cg_report.e[l];
                if (!e->requested)
                        continue;
                cJSON *lo = cJSON_CreateObject();
                cJSON_AddStringToObject(lo, "limit", dsv_cgroup_limit_to_string(l));
                cJSON_AddStringToObject(lo, "value", e->value);
                cJSON_AddBoolToObject(lo, "in_effect", e->applied);
                if (!for_page)
                        cJSON_AddStringToObject(lo, "file", e->file);
                cJSON_AddStringToObject(lo, "reason", e->reason);
                cJSON_AddItemToArray(lims, lo);
        }
        cJSON_AddStringToObject(o, "sched", in->sched);
        add_drift(o, drift);
        if (for_page) {
                cJSON_AddNumberToObject(o, "restarts", in->restarts);
                return o;
        }
        cJSON_AddNumberToObject(o, "weights_hugepages_bytes", (double)in->weights_huge_bytes);
        struct dsv_gateway_instance_stats gs;
        bool have = gw && dsv_gateway_instance_stats(gw, in->gw_id, &gs) == 0;
        cJSON_AddNumberToObject(o, "queue_depth", have ? (double)gs.waiting : -1);
        cJSON_AddNumberToObject(o, "running", have ? (double)gs.running : -1);
        if (have && gs.kv_disk_bytes_capacity > 0) {
                cJSON *d = cJSON_AddObjectToObject(o, "kv_disk");
                cJSON_AddNumberToObject(d, "bytes_used", (double)gs.kv_disk_bytes_used);
                cJSON_AddNumberToObject(d, "bytes_capacity", (double)gs.kv_disk_bytes_capacity);
                cJSON_AddNumberToObject(d, "blocks_written", (double)gs.kv_disk_blocks_written);
                cJSON_AddNumberToObject(d, "blocks_read", (double)gs.kv_disk_blocks_read);
                cJSON_AddNumberToObject(d, "blocks_dropped", (double)gs.kv_disk_blocks_dropped);
                cJSON_AddNumberToObject(d, "blocks_corrupt", (double)gs.kv_disk_blocks_corrupt);
                cJSON_AddNumberToObject(d, "hit_tokens_ram", (double)(gs.prefix_hit_tokens - gs.prefix_disk_hit_tokens));
                cJSON_AddNumberToObject(d, "hit_tokens_disk", (double)gs.prefix_disk_hit_tokens);
                cJSON_AddBoolToObject(d, "failed", gs.kv_disk_failed);
        }
        cJSON_AddNumberToObject(o, "restarts", in->restarts);
        cJSON_AddNumberToObject(o, "uptime_s",
                                in->pid && in->state != SUP_STATE_BACKOFF ? (double)(now - in->started_ms) / 1000.0
                                                                          : 0);
        cJSON_AddNumberToObject(o, "ctxsw_involuntary_per_s", in->ctxsw_invol_per_s);
        cJSON_AddNumberToObject(o, "migrations_per_s", in->migrations_per_s);
        return o;
}

/* The last SIGHUP: when, what it applied and how, what it did not and why; null before
 * the first. */
static void add_reload(cJSON *root, const struct sup_reload_report *rep, int64_t now) {
        if (!rep->at_ms) {
                cJSON_AddNullToObject(root, "reload");
                return;
        }
        cJSON *o = cJSON_AddObjectToObject(root, "reload");
        cJSON_AddNumberToObject(o, "at_unix", (double)rep->at_unix);
        cJSON_AddNumberToObject(o, "ago_s", (double)(now - rep->at_ms) / 1000.0);
        cJSON_AddStringToObject(o, "error", rep->error);
        cJSON *arr = cJSON_AddArrayToObject(o, "applied");
        for (int i = 0; i < rep->n_applied; i++) {
                cJSON *it = cJSON_CreateObject();
                cJSON_AddStringToObject(it, "option", rep->applied[i].option);
                cJSON_AddStringToObject(it, "how", rep->applied[i].note);
                cJSON_AddItemToArray(arr, it);
        }
        arr = cJSON_AddArrayToObject(o, "not_applied");
        for (int i = 0; i < rep->n_not_applied; i++) {
                cJSON *it = cJSON_CreateObject();
                cJSON_AddStringToObject(it, "option", rep->not_applied[i].option);
                cJSON_AddStringToObject(it, "reason", rep->not_applied[i].note);
                cJSON_AddItemToArray(arr, it);
        }
}

char *sup_status_json(const struct sup *s) {
        int64_t now = dsv_clock_now_ms();
        cJSON *root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "pid", getpid());
        cJSON_AddStringToObject(root, "state", s->stopping ? "stopping" : s->ready_sent ? "ready" : "starting");
        cJSON_AddNumberToObject(root, "uptime_s", (double)(now - s->started_ms) / 1000.0);
        cJSON_AddStringToObject(root, "model", s->model.path);
        cJSON_AddStringToObject(root, "model_id", s->model.id);
        cJSON_AddNumberToObject(root, "model_bytes", (double)s->model.bytes);
        cJSON_AddStringToObject(root, "host", s->cfg.host);
        cJSON_AddNumberToObject(root, "port", s->gw_port);
        cJSON_AddStringToObject(root, "hugepages", dsv_hugepages_mode_to_string(s->cfg.hugepages));
        cJSON_AddNumberToObject(root, "rt_priority", s->cfg.rt_priority);
        cJSON_AddNumberToObject(root, "rt_fallbacks", (double)sup_instances_rt_fallbacks(s->inst, s->n));
        cJSON_AddStringToObject(root, "cgroups", s->env.cg_host ? "in use" : s->cg_note);
        cJSON_AddStringToObject(root, "cgroup_parent", s->cfg.cgroup_parent);
        cJSON_AddNumberToObject(root, "instances_ready", sup_instances_in_state(s->inst, s->n, SUP_STATE_READY));
        cJSON_AddNumberToObject(root, "instances_total", s->n);
        add_weights(root, &s->weights);
        add_gateway(root, s->env.gw);
        add_reload(root, &s->reload, now);
        cJSON *arr = cJSON_AddArrayToObject(root, "instances");
        for (int i = 0; i < s->n; i++)
                cJSON_AddItemToArray(arr, instance_json(&s->inst[i], &s->drift_verdict[i], s->env.gw, now, false));
        char *text = root ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
        return text;
}

char *sup_status_page_json(const struct sup *s) {
        int64_t now = dsv_clock_now_ms();
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "state", s->stopping ? "stopping" : s->ready_sent ? "ready" : "starting");
        cJSON_AddStringToObject(root, "cgroups", s->env.cg_host ? "in use" : s->cg_note);
        cJSON *arr = cJSON_AddArrayToObject(root, "instances");
        for (int i = 0; i < s->n; i++)
                cJSON_AddItemToArray(arr, instance_json(&s->inst[i], &s->drift_verdict[i], s->env.gw, now, true));
        char *text = root ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
        return text;
}
