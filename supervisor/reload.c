/* reload.c — SIGHUP: the config file read again and every changed option, as config.c's
 * option table finds them, either applied or named with the reason it is not:
 *
 *   at once          the restart policy: the instances' backoff starts over with it;
 *   new workers      a rolling restart (instance.c) gives each instance a new worker with
 *                    the new worker options and binary; a new model or hugepages mode
 *                    first gets its weight images (the old ones stay mapped by the old
 *                    workers until they exit); new limits or rt-priority give each
 *                    instance a new cgroup before its new worker;
 *   not applied      what only a new `dsvisor start` can change (placement, the gateway's
 *                    address and served id, the runtime directory, the cgroup parent), and
 *                    a new value that failed its check (a worker that is not executable, a
 *                    model that does not load, a memory limit that would not be in effect,
 *                    the RT preflight).
 *
 * Loading new weights blocks the main thread (the gateway's threads go on serving the
 * running workers): systemd hears STATUS= and a longer watchdog timeout for it.
 *
 * Each reload's outcome is logged (a warning per option not applied) and kept in
 * s->reload for `dsvisor status`. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sup.h"

/* One reload's work on s: the new configuration and what was done for it already. */
struct reload_pass {
        struct sup *s;
        const struct sup_config *next;
        bool weights_tried;   /* model and hugepages share one new set of weight images */
        int weights_r;
        char weights_why[256];
        bool new_cgroups;     /* the instances need groups with the new limits */
};

static void add_item(struct sup_reload_item *items, int *n, const char *option, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void add_item(struct sup_reload_item *items, int *n, const char *option, const char *fmt, ...) {
        for (int i = 0; i < *n; i++)
                if (strcmp(items[i].option, option) == 0)
                        return; /* named once */
        if (*n >= SUP_RELOAD_MAX_ITEMS)
                return;
        struct sup_reload_item *it = &items[(*n)++];
        snprintf(it->option, sizeof it->option, "%s", option);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(it->note, sizeof it->note, fmt, ap);
        va_end(ap);
}

static void not_applied(struct sup *s, const char *option, const char *why) {
        add_item(s->reload.not_applied, &s->reload.n_not_applied, option, "%s", why);
}

/* The new model and/or hugepages mode: resolved and loaded into new images on the
 * instances' nodes, which replace the running ones (new workers map them). The served id
 * stays the gateway's. */
static int reload_weights(struct reload_pass *p, char *why, size_t why_size) {
        struct sup *s = p->s;
        struct sup_config c = s->cfg;
        sup_config_take(&c, p->next, "model");
        sup_config_take(&c, p->next, "hugepages");
        struct sup_model m;
        int r = sup_model_resolve(&c, s->exe_dir, &m);
        if (r < 0) {
                snprintf(why, why_size, "the model could not be resolved: %s (logged)", strerror(-r));
                return r;
        }
        struct sup_weight_set *set = calloc(1, sizeof *set);
        if (!set) {
                snprintf(why, why_size, "out of memory");
                return -ENOMEM;
        }
        int nodes[SUP_MAX_INSTANCES];
        for (int i = 0; i < s->n; i++)
                nodes[i] = s->inst[i].node_os;
        /* The store keeps one image per name: the running ones leave it first (a new
         * hugepages mode with the same model has the same names). */
        sup_weight_set_unstore(&s->weights, &s->model);
        r = sup_weight_set_load(set, &m, nodes, s->n, c.hugepages);
        if (r < 0) {
                sup_weight_set_done(set);
                free(set);
                sup_weight_set_store(&s->weights, &s->model);
                snprintf(why, why_size, "its weight images could not be loaded: %s (logged)", strerror(-r));
                return r;
        }
        sup_weight_set_done(&s->weights);
        s->weights = *set;
        free(set);
        for (int i = 0; i < s->n; i++)
                s->inst[i].weights = sup_weight_set_find(&s->weights, s->inst[i].node_os);
        if (strcmp(m.id, s->model.id) != 0) {
                char note[256];
                snprintf(note, sizeof note,
                         "the new model would be served as '%.64s'; the gateway serves and accepts '%.64s' until a "
                         "full restart",
                         m.id, s->model.id);
                not_applied(s, "model-id", note);
                snprintf(m.id, sizeof m.id, "%s", s->model.id);
        }
        struct sup_chat_format f;
        if (sup_chat_format_detect(&s->cfg, &m, &f) == 0 &&
            (f.reasoning != s->chat.reasoning || f.think_opened != s->chat.think_opened || f.tools != s->chat.tools))
                not_applied(s, "model", "the new model's chat template reasons or calls tools differently; the gateway "
                                        "splits and parses the output as it decided at start until a full restart");
        s->model = m;
        return 0;
}

/* Whether the instances' groups can have a memory limit: a v1 memory hierarchy or memory
 * enabled in the v2 tree. why says why not. */
static bool memory_controller(const struct sup *s, char *why, size_t why_size) {
        struct dsv_cgroup_host_info info;
        if (!s->env.cg_host) {
                snprintf(why, why_size, "the instances have no cgroups (%.150s)", s->cg_note);
                return false;
        }
        if (dsv_cgroup_host_info(s->env.cg_host, &info) == 0 &&
            !((info.v1_mounted | info.v2_enabled) & DSV_CGROUP_CTRL_MEMORY)) {
                snprintf(why, why_size, "no memory controller here (no v1 memory hierarchy, not enabled in the v2 tree)");
                return false;
        }
        return true;
}

/* The checks a new value needs before the running configuration takes it: < 0 when it
 * cannot (why says why), 1 when it is taken with a caveat (why says it), else 0. */
static int check_option(struct reload_pass *p, const char *option, char *why, size_t why_size) {
        struct sup *s = p->s;
        const struct sup_config *next = p->next;
        if (strcmp(option, "model") == 0 || strcmp(option, "hugepages") == 0) {
                if (!p->weights_tried) {
                        p->weights_tried = true;
                        sup_notify_long_step(s, "reloading: loading the weights");
                        p->weights_r = reload_weights(p, p->weights_why, sizeof p->weights_why);
                        sup_notify_long_step(s, NULL);
                }
                snprintf(why, why_size, "%s", p->weights_why);
                return p->weights_r;
        }
        if (strcmp(option, "worker") == 0) {
                char path[PATH_MAX];
                int r = sup_worker_path(next, s->exe_dir, path, sizeof path);
                if (r < 0) {
                        snprintf(why, why_size, "'%.200s' is not executable: %s", path, strerror(-r));
                        return r;
                }
                memcpy(s->worker_path, path, sizeof s->worker_path);
                return 0;
        }
        if (strcmp(option, "rt-priority") == 0) {
                if (next->rt_priority > 0) {
                        char rt_why[200];
                        int r = sup_rt_preflight(NULL, next->rt_priority, s->n_free_cpus, rt_why, sizeof rt_why);
                        if (r < 0) {
                                snprintf(why, why_size, "refused: %s", rt_why);
                                return r;
                        }
                }
                p->new_cgroups = s->env.cg_host != NULL; /* their share of RT runtime */
                return 0;
        }
        if (strcmp(option, "memory-max-mib") == 0) {
                p->new_cgroups = s->env.cg_host != NULL;
                char none[200];
                if (next->memory_max_bytes == 0 || memory_controller(s, none, sizeof none))
                        return 0;
                if (!s->cfg.allow_unenforced) {
                        snprintf(why, why_size, "%.150s; it would not be in effect (--allow-unenforced lets it be)", none);
                        return -EOPNOTSUPP;
                }
                snprintf(why, why_size, "new workers, rolling restart; NOT in effect: %.150s (--allow-unenforced)", none);
                return 1;
        }
        return 0;
}

static void log_outcome(const struct sup_reload_report *rep, bool rolling) {
        for (int i = 0; i < rep->n_applied; i++)
                sup_log(6, "Reload: %s applied (%s)", rep->applied[i].option, rep->applied[i].note);
        for (int i = 0; i < rep->n_not_applied; i++)
                sup_log(4, "Reload: %s NOT applied: %s", rep->not_applied[i].option, rep->not_applied[i].note);
        if (rep->n_applied + rep->n_not_applied == 0)
                sup_log(6, "Reloaded the configuration: nothing changed");
        else
                sup_log(rep->n_not_applied ? 4 : 6, "Reloaded the configuration: %d option%s applied, %d not%s",
                        rep->n_applied, rep->n_applied == 1 ? "" : "s", rep->n_not_applied,
                        rolling ? "; rolling restart, one instance at a time" : "");
}

void sup_reload(struct sup *s) {
        struct sup_reload_report *rep = &s->reload;
        struct sup_config next;
        char err[sizeof rep->error - 64];
        memset(rep, 0, sizeof *rep);
        rep->at_ms = dsv_clock_now_ms();
        rep->at_unix = (int64_t)time(NULL);
        if (s->stopping) {
                snprintf(rep->error, sizeof rep->error, "stopping: nothing is reloaded");
                sup_log(4, "Reload ignored: stopping");
                return;
        }
        int r = sup_config_reload(&s->cfg, &next, err, sizeof err);
        if (r < 0) {
                snprintf(rep->error, sizeof rep->error, "%s", err);
                sup_log(3, "Reload failed, keeping the running configuration: %s", err);
                return;
        }
        struct sup_config_change ch[SUP_RELOAD_MAX_ITEMS];
        int n = sup_config_changes(&s->cfg, &next, ch, SUP_RELOAD_MAX_ITEMS);
        struct reload_pass p = {.s = s, .next = &next};
        bool rolling = false, policy = false;
        for (int i = 0; i < n; i++) {
                char why[256] = "";
                if (ch[i].how == SUP_RELOAD_FULL_RESTART) {
                        snprintf(why, sizeof why, "%s: needs a full restart", ch[i].why);
                        not_applied(s, ch[i].option, why);
                        continue;
                }
                int checked = check_option(&p, ch[i].option, why, sizeof why);
                if (checked < 0) {
                        not_applied(s, ch[i].option, why);
                        continue;
                }
                sup_config_take(&s->cfg, &next, ch[i].option);
                bool at_once = ch[i].how == SUP_RELOAD_AT_ONCE;
                add_item(rep->applied, &rep->n_applied, ch[i].option, "%s",
                         checked > 0 ? why : at_once ? "at once" : "new workers, rolling restart");
                rolling |= !at_once;
                policy |= at_once;
        }
        const char *overridden[SUP_RELOAD_MAX_ITEMS];
        int n_over = sup_config_cli_overrides(&s->cfg, overridden, SUP_RELOAD_MAX_ITEMS);
        for (int i = 0; i < n_over; i++)
                not_applied(s, overridden[i], "the command line sets it, and the command line wins over the file");
        if (p.new_cgroups) {
                uint64_t rt_share = s->cfg.rt_priority > 0 ? sup_cgroup_rt_share_us(s->env.cg_host, s->n) : 0;
                for (int i = 0; i < s->n; i++) {
                        s->inst[i].rt_runtime_us = rt_share;
                        s->inst[i].renew_cgroup = true;
                }
        }
        if (policy)
                for (int i = 0; i < s->n; i++)
                        sup_backoff_init(&s->inst[i].backoff, s->cfg.restart_backoff_min_ms,
                                         s->cfg.restart_backoff_max_ms, s->cfg.restart_limit,
                                         s->cfg.restart_window_ms);
        if (rolling)
                sup_roll_begin(&s->roll, s->inst, s->n);
        log_outcome(rep, rolling);
}
