/* Unit tests for `dsvisor start`'s configuration (supervisor/config.c), restart backoff,
 * RT preflight and thread scheduling (instance.c), the control socket (control.c) and the
 * GLIBC_TUNABLES string the supervisor re-executes itself with (malloc_env.c). */
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sup.h"
#include "t.h"

static int parse(struct sup_config *cfg, char *err, size_t n, int argc, char **argv) {
        return sup_config_parse(argc, argv, cfg, err, n);
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");
        fputs(text, f);
        fclose(f);
}

TEST(defaults) {
        struct sup_config c;
        char err[256];
        char *argv[] = {"start"};
        ASSERT_EQ(parse(&c, err, sizeof err, 1, argv), 0);
        ASSERT_EQ(c.port, 8080);
        ASSERT_TRUE(strcmp(c.host, "127.0.0.1") == 0);
        ASSERT_EQ(c.hugepages, DSV_HUGEPAGES_MODE_AUTO);
        ASSERT_EQ(c.n_instances, 0);
        ASSERT_EQ(c.rt_priority, 0);
        ASSERT_EQ(c.model[0], 0);
}

TEST(command_line) {
        struct sup_config c;
        char err[256];
        char *argv[] = {"start", "--model", "/m.dse", "--instances", "2", "--threads-per-instance", "3",
                        "--host", "::1", "--port", "0", "--rt-priority", "10", "--hugepages", "require",
                        "--no-housekeeping", "--memory-max-mib", "512"};
        ASSERT_EQ(parse(&c, err, sizeof err, 18, argv), 0);
        ASSERT_TRUE(strcmp(c.model, "/m.dse") == 0);
        ASSERT_EQ(c.n_instances, 2);
        ASSERT_EQ(c.threads_per_instance, 3);
        ASSERT_TRUE(strcmp(c.host, "::1") == 0);
        ASSERT_EQ(c.port, 0);
        ASSERT_EQ(c.rt_priority, 10);
        ASSERT_EQ(c.hugepages, DSV_HUGEPAGES_MODE_REQUIRE);
        ASSERT_TRUE(c.no_housekeeping);
        ASSERT_EQ(c.memory_max_bytes, 512ull << 20);
}

TEST(bad_command_line_values_are_named) {
        struct sup_config c;
        char err[256];
        char *a1[] = {"start", "--rt-priority", "50"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, a1), -EINVAL);
        ASSERT_TRUE(strstr(err, "rt-priority") && strstr(err, "1..49") == NULL && strstr(err, "0..49"));
        char *a2[] = {"start", "--hugepages", "maybe"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, a2), -EINVAL);
        ASSERT_TRUE(strstr(err, "hugepages") && strstr(err, "maybe"));
        char *a3[] = {"start", "--instances", "two"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, a3), -EINVAL);
        ASSERT_TRUE(strstr(err, "not an integer"));
        char *a4[] = {"start", "--frobnicate"};
        ASSERT_EQ(parse(&c, err, sizeof err, 2, a4), -EINVAL);
        ASSERT_TRUE(strstr(err, "--frobnicate"));
        char *a5[] = {"start", "extra"};
        ASSERT_EQ(parse(&c, err, sizeof err, 2, a5), -EINVAL);
        char *a6[] = {"start", "--help"};
        ASSERT_EQ(parse(&c, err, sizeof err, 2, a6), 1);
}

TEST(log_and_metrics_options) {
        struct sup_config c;
        char err[256];
        char *ok[] = {"start", "--log-format", "json", "--log-requests", "--metrics-compat", "vllm"};
        ASSERT_EQ(parse(&c, err, sizeof err, 6, ok), 0);
        ASSERT_TRUE(strcmp(c.log_format, "json") == 0);
        ASSERT_TRUE(c.log_requests);
        ASSERT_TRUE(strcmp(c.metrics_compat, "vllm") == 0);
        char *defaults[] = {"start"};
        ASSERT_EQ(parse(&c, err, sizeof err, 1, defaults), 0);
        ASSERT_TRUE(c.log_format[0] == 0 && !c.log_requests && c.metrics_compat[0] == 0);
        char *bad_log[] = {"start", "--log-format", "yaml"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, bad_log), -EINVAL);
        ASSERT_TRUE(strstr(err, "log-format") && strstr(err, "yaml"));
        char *bad_compat[] = {"start", "--metrics-compat", "tgi"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, bad_compat), -EINVAL);
        ASSERT_TRUE(strstr(err, "metrics-compat") && strstr(err, "tgi"));
        sup_config_init(&c);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"log_format\": \"json\", \"log-requests\": true, \"metrics_compat\": \"vllm\"}",
                                        err, sizeof err),
                  0);
        ASSERT_TRUE(strcmp(c.log_format, "json") == 0 && c.log_requests && strcmp(c.metrics_compat, "vllm") == 0);
}

TEST(config_file_and_command_line_wins) {
        char path[] = "/tmp/test-supervisor-config.XXXXXX";
        int fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        write_file(path, "{\"instances\": 3, \"port\": 9000, \"hugepages\": \"off\", \"rt-priority\": 5,"
                         " \"no-housekeeping\": true, \"model\": \"/file.dse\"}");
        struct sup_config c;
        char err[256];
        char *argv[] = {"start", "--config", path, "--port", "9100"};
        int r = parse(&c, err, sizeof err, 5, argv);
        if (r < 0)
                fprintf(stderr, "  %s\n", err);
        ASSERT_EQ(r, 0);
        ASSERT_EQ(c.n_instances, 3);
        ASSERT_EQ(c.port, 9100); /* the command line wins */
        ASSERT_EQ(c.hugepages, DSV_HUGEPAGES_MODE_OFF);
        ASSERT_EQ(c.rt_priority, 5);
        ASSERT_TRUE(c.no_housekeeping);
        ASSERT_TRUE(strcmp(c.model, "/file.dse") == 0);

        /* reload: the file changed, the command line's port still wins */
        write_file(path, "{\"instances\": 4, \"port\": 9001, \"grace-ms\": 1234}");
        struct sup_config n;
        ASSERT_EQ(sup_config_reload(&c, &n, err, sizeof err), 0);
        ASSERT_EQ(n.n_instances, 4);
        ASSERT_EQ(n.port, 9100);
        ASSERT_EQ(n.grace_ms, 1234);
        ASSERT_EQ(n.hugepages, DSV_HUGEPAGES_MODE_AUTO); /* gone from the file: default */

        /* a bad file on reload leaves the old configuration alone */
        write_file(path, "{\"instances\": -1}");
        ASSERT_EQ(sup_config_reload(&c, &n, err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "instances") && strstr(err, path));
        unlink(path);
        ASSERT_EQ(sup_config_reload(&c, &n, err, sizeof err), -ENOENT);
}

/* The number of options `dsvisor start` has: the lines of its usage. */
static int count_options(void) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        sup_start_usage(f);
        fclose(f);
        int n = 0;
        for (const char *p = text; (p = strstr(p, "\n  --")) != NULL; p++)
                n++;
        free(text);
        return n;
}

static const struct sup_config_change *find_change(const struct sup_config_change *ch, int n, const char *option) {
        for (int i = 0; i < n; i++)
                if (strcmp(ch[i].option, option) == 0)
                        return &ch[i];
        return NULL;
}

TEST(reload_names_every_changed_option) {
        /* Every byte of next differs but --config's path: every option but "config" is a
         * change, each named once, and one that needs a full restart says why. */
        static struct sup_config cur, next;
        sup_config_init(&cur);
        memset(&next, 0x5a, sizeof next);
        memcpy(next.config_path, cur.config_path, sizeof next.config_path);
        memcpy(next.cli_set, cur.cli_set, sizeof next.cli_set);
        struct sup_config_change ch[128];
        int n = sup_config_changes(&cur, &next, ch, 128);
        int n_options = count_options();
        ASSERT_TRUE(n_options > 20);
        ASSERT_EQ(n, n_options - 1);
        ASSERT_TRUE(find_change(ch, n, "config") == NULL);
        for (int i = 0; i < n; i++) {
                ASSERT_TRUE(find_change(ch, i, ch[i].option) == NULL); /* once */
                if (ch[i].how == SUP_RELOAD_FULL_RESTART)
                        ASSERT_TRUE(ch[i].why && ch[i].why[0]);
        }
        static const char *const by_new_workers[] = {"model", "worker", "hugepages", "rt-priority", "grace-ms",
                                                     "n-ctx", "max-batch", "kv-mem-mib", "memory-max-mib"};
        for (size_t k = 0; k < sizeof by_new_workers / sizeof by_new_workers[0]; k++)
                ASSERT_EQ(find_change(ch, n, by_new_workers[k])->how, SUP_RELOAD_NEW_WORKERS);
        static const char *const at_once[] = {"restart-limit", "restart-window-ms", "restart-backoff-ms",
                                              "restart-backoff-max-ms"};
        for (size_t k = 0; k < sizeof at_once / sizeof at_once[0]; k++)
                ASSERT_EQ(find_change(ch, n, at_once[k])->how, SUP_RELOAD_AT_ONCE);
        static const char *const full[] = {"model-id", "instances", "threads-per-instance", "no-housekeeping", "host",
                                           "port", "runtime-dir", "cgroup-parent", "allow-unenforced"};
        for (size_t k = 0; k < sizeof full / sizeof full[0]; k++)
                ASSERT_EQ(find_change(ch, n, full[k])->how, SUP_RELOAD_FULL_RESTART);

        /* Nothing changed: nothing named; one option changed: only it. */
        ASSERT_EQ(sup_config_changes(&cur, &cur, ch, 128), 0);
        struct sup_config one = cur;
        one.memory_max_bytes = 700ull << 20;
        ASSERT_EQ(sup_config_changes(&cur, &one, ch, 128), 1);
        ASSERT_STREQ(ch[0].option, "memory-max-mib");

        /* Taking one option copies that one only. */
        struct sup_config taken = cur;
        ASSERT_EQ(sup_config_take(&taken, &next, "max-batch"), 0);
        ASSERT_EQ(taken.max_batch, next.max_batch);
        ASSERT_EQ(taken.n_ctx, cur.n_ctx);
        ASSERT_EQ(sup_config_changes(&cur, &taken, ch, 128), 1);
        ASSERT_EQ(sup_config_take(&taken, &next, "no-such-option"), -ENOENT);
}

TEST(reload_names_file_values_the_command_line_overrides) {
        char path[] = "/tmp/test-supervisor-overrides.XXXXXX";
        int fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        write_file(path, "{\"port\": 9000, \"max_batch\": 4, \"model\": \"/cli.dse\"}");
        struct sup_config c;
        char err[256];
        char *argv[] = {"start", "--config", path, "--port", "9100", "--model", "/cli.dse", "--n-ctx", "64"};
        ASSERT_EQ(parse(&c, err, sizeof err, 9, argv), 0);
        const char *over[8];
        /* port: the file differs; model: the same; n-ctx: not in the file; max-batch: not on the CLI */
        ASSERT_EQ(sup_config_cli_overrides(&c, over, 8), 1);
        ASSERT_STREQ(over[0], "port");
        write_file(path, "{\"port\": 9100}");
        ASSERT_EQ(sup_config_cli_overrides(&c, over, 8), 0);
        unlink(path);
        ASSERT_EQ(sup_config_cli_overrides(&c, over, 8), 0);
}

TEST(unenforced_limit_is_an_error_unless_allowed) {
        struct sup_config c;
        char err[512];
        char *a1[] = {"start", "--memory-max-mib", "512"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, a1), 0);
        ASSERT_TRUE(!c.allow_unenforced);
        struct dsv_cgroup_report rep;
        memset(&rep, 0, sizeof rep);
        rep.e[DSV_CGROUP_LIMIT_MEMORY_MAX].requested = true;
        snprintf(rep.e[DSV_CGROUP_LIMIT_MEMORY_MAX].reason, sizeof rep.e[0].reason, "no memory controller here");
        ASSERT_EQ(sup_config_check_enforced(&c, &rep, "", err, sizeof err), -EPERM);
        ASSERT_TRUE(strstr(err, "--memory-max-mib") && strstr(err, "no memory controller here") &&
                    strstr(err, "--allow-unenforced"));
        ASSERT_EQ(sup_config_check_enforced(&c, NULL, "none: Permission denied", err, sizeof err), -EPERM);
        ASSERT_TRUE(strstr(err, "--memory-max-mib") && strstr(err, "none: Permission denied"));
        rep.e[DSV_CGROUP_LIMIT_MEMORY_MAX].applied = true;
        ASSERT_EQ(sup_config_check_enforced(&c, &rep, "", err, sizeof err), 0);

        /* --allow-unenforced, or "allow-unenforced" in the file, lets it run. */
        rep.e[DSV_CGROUP_LIMIT_MEMORY_MAX].applied = false;
        char *a2[] = {"start", "--memory-max-mib", "512", "--allow-unenforced"};
        ASSERT_EQ(parse(&c, err, sizeof err, 4, a2), 0);
        ASSERT_TRUE(c.allow_unenforced);
        ASSERT_EQ(sup_config_check_enforced(&c, &rep, "", err, sizeof err), 0);
        ASSERT_EQ(sup_config_check_enforced(&c, NULL, "none", err, sizeof err), 0);
        sup_config_init(&c);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"memory_max_mib\": 64, \"allow_unenforced\": true}", err, sizeof err), 0);
        ASSERT_TRUE(c.allow_unenforced);
        ASSERT_EQ(sup_config_check_enforced(&c, NULL, "none", err, sizeof err), 0);

        /* No limit asked for: nothing to enforce. */
        char *a0[] = {"start"};
        ASSERT_EQ(parse(&c, err, sizeof err, 1, a0), 0);
        ASSERT_EQ(sup_config_check_enforced(&c, NULL, "none", err, sizeof err), 0);
}

TEST(json_errors_name_the_key) {
        struct sup_config c;
        char err[256];
        sup_config_init(&c);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"instancez\": 2}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "unknown key \"instancez\""));
        ASSERT_EQ(sup_config_apply_json(&c, "{\"instances\": \"2\"}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "instances: expected an integer"));
        ASSERT_EQ(sup_config_apply_json(&c, "{\"instances\": 2.5}", err, sizeof err), -EINVAL);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"port\": 70000}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "port") && strstr(err, "70000"));
        ASSERT_EQ(sup_config_apply_json(&c, "{\"hugepages\": true}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "hugepages: expected a string"));
        ASSERT_EQ(sup_config_apply_json(&c, "{\"no-housekeeping\": 1}", err, sizeof err), -EINVAL);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"config\": \"/x\"}", err, sizeof err), -EINVAL);
        ASSERT_EQ(sup_config_apply_json(&c, "[1]", err, sizeof err), -EINVAL);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"port\": ", err, sizeof err), -EINVAL);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"restart-backoff-ms\": 5000, \"restart-backoff-max-ms\": 100}", err,
                                        sizeof err),
                  -EINVAL);
        ASSERT_TRUE(strstr(err, "restart-backoff"));
        ASSERT_EQ(sup_config_apply_json(&c, "{\"runtime-dir\": \"relative\"}", err, sizeof err), -EINVAL);
}

TEST(backoff_doubles_caps_and_gives_up) {
        struct sup_backoff b;
        sup_backoff_init(&b, 100, 1000, 6, 60000);
        int64_t t = 1000000;
        ASSERT_EQ(sup_backoff_on_exit(&b, t, -1), 0); /* the first restart is immediate */
        ASSERT_EQ(sup_backoff_on_exit(&b, t + 1, -1), 100);
        ASSERT_EQ(sup_backoff_on_exit(&b, t + 2, -1), 200);
        ASSERT_EQ(sup_backoff_on_exit(&b, t + 3, -1), 400);
        ASSERT_EQ(sup_backoff_on_exit(&b, t + 4, -1), 800);
        ASSERT_EQ(sup_backoff_on_exit(&b, t + 5, -1), 1000); /* capped */
        ASSERT_EQ(sup_backoff_on_exit(&b, t + 6, -1), -ELOOP); /* 7 exits in the window */
}

TEST(backoff_window_and_healthy_reset) {
        struct sup_backoff b;
        sup_backoff_init(&b, 100, 30000, 3, 10000);
        int64_t t = 0;
        for (int i = 0; i < 10; i++) { /* one exit every 6 s never exceeds 3 per 10 s */
                t += 6000;
                ASSERT_TRUE(sup_backoff_on_exit(&b, t, -1) >= 0);
        }
        /* up for over a minute: the next restart is immediate again, then the minimum */
        t += 100000;
        ASSERT_EQ(sup_backoff_on_exit(&b, t, t - 61000), 0);
        ASSERT_EQ(sup_backoff_on_exit(&b, t + 10, t), 100);
        ASSERT_EQ(sup_backoff_on_exit(&b, t + 20, t), 200);
}

TEST(rt_preflight) {
        char dir[] = "/tmp/test-supervisor-proc.XXXXXX", why[256], path[512];
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/sys", dir);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/sys/kernel", dir);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/sys/kernel/sched_rt_runtime_us", dir);
        write_file(path, "950000\n");
        ASSERT_EQ(sup_rt_preflight(dir, 10, 1, why, sizeof why), 0);
        ASSERT_EQ(sup_rt_preflight(dir, 10, 0, why, sizeof why), -EPERM);
        ASSERT_TRUE(strstr(why, "no CPU is left free of FIFO compute threads"));
        ASSERT_EQ(sup_rt_preflight(dir, 50, 1, why, sizeof why), -EINVAL);
        ASSERT_EQ(sup_rt_preflight(dir, 0, 1, why, sizeof why), -EINVAL);
        write_file(path, "-1\n");
        ASSERT_EQ(sup_rt_preflight(dir, 10, 1, why, sizeof why), -EPERM);
        ASSERT_TRUE(strstr(why, "sched_rt_runtime_us = -1"));
        unlink(path);
        ASSERT_EQ(sup_rt_preflight(dir, 10, 1, why, sizeof why), -ENOENT);
        snprintf(path, sizeof path, "rm -rf '%s'", dir);
        ASSERT_EQ(system(path), 0);
}

TEST(thread_policy_readback) {
        char buf[64];
        ASSERT_TRUE(sup_thread_policy_format(gettid(), buf, sizeof buf) > 0);
        ASSERT_TRUE(strcmp(buf, "SCHED_OTHER") == 0);
        ASSERT_EQ(sup_thread_set_fifo(gettid(), 50), -EINVAL);
        ASSERT_EQ(sup_thread_set_fifo(0, 10), -EINVAL);
}

/* Serves connections until one asks for "status" (the EADDRINUSE probe leaves an
 * empty connection in the backlog first). */
static void *serve_one(void *arg) {
        int lfd = *(int *)arg;
        for (int served = 0; served < 3;) {
                int fd = accept(lfd, NULL, NULL);
                if (fd < 0) {
                        usleep(1000);
                        continue;
                }
                served++;
                char cmd[32];
                int r = sup_control_read_cmd(fd, 2000, cmd, sizeof cmd);
                bool ok = r == 0 && strcmp(cmd, "status") == 0;
                sup_control_write(fd, ok ? "{\"ok\":\"status\"}" : "{\"error\":1}");
                close(fd);
                if (ok)
                        break;
        }
        return NULL;
}

TEST(control_socket_roundtrip_and_mode) {
        char dir[] = "/tmp/test-supervisor-ctl.XXXXXX", path[256];
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        ASSERT_EQ(sup_control_path(dir, path, sizeof path), 0);
        int lfd = sup_control_listen(path);
        ASSERT_OK(lfd);
        struct stat st;
        ASSERT_EQ(stat(path, &st), 0);
        ASSERT_EQ(st.st_mode & 0777, 0600);
        ASSERT_EQ(sup_control_listen(path), -EADDRINUSE); /* a live supervisor owns it */
        pthread_t th;
        pthread_create(&th, NULL, serve_one, &lfd);
        char *reply = NULL;
        ASSERT_EQ(sup_control_call(path, "status", 2000, &reply), 0);
        pthread_join(th, NULL);
        ASSERT_TRUE(strcmp(reply, "{\"ok\":\"status\"}") == 0);
        free(reply);
        close(lfd);
        /* the socket file of a dead supervisor is replaced */
        lfd = sup_control_listen(path);
        ASSERT_OK(lfd);
        close(lfd);
        unlink(path);
        ASSERT_EQ(sup_control_call(path, "status", 100, &reply), -ENOENT);
        rmdir(dir);
}

TEST(cgroup_parent_option_and_key) {
        struct sup_config c;
        char err[256];
        char *a1[] = {"start", "--cgroup-parent", "inference/prod"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, a1), 0);
        ASSERT_STREQ(c.cgroup_parent, "inference/prod");
        char *a0[] = {"start"};
        ASSERT_EQ(parse(&c, err, sizeof err, 1, a0), 0);
        ASSERT_STREQ(c.cgroup_parent, ""); /* default: the own group itself */

        /* Only below the own group: absolute paths, '..', '.' and empty components are
         * refused, with the option and the rule named. */
        static const struct { const char *arg, *why; } bad[] = {
                {"/sys/fs/cgroup/x", "absolute"}, {"../escape", "'..'"}, {"a/../../b", "'..'"},
                {"a//b", "empty component"},      {"a/", "empty component"}, {"./a", "'.'"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                char *a[] = {"start", "--cgroup-parent", (char *)bad[i].arg};
                err[0] = '\0';
                ASSERT_EQ(parse(&c, err, sizeof err, 3, a), -EINVAL);
                ASSERT_TRUE(strstr(err, "cgroup-parent") && strstr(err, bad[i].arg) && strstr(err, bad[i].why));
        }
        char *a2[] = {"start", "--cgroup-parent", ""};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, a2), -EINVAL);

        /* The JSON key, spelled with '_' or '-' like every key; the command line wins. */
        sup_config_init(&c);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"cgroup_parent\": \"inference/prod\", \"rt_priority\": 3}", err,
                                        sizeof err),
                  0);
        ASSERT_STREQ(c.cgroup_parent, "inference/prod");
        ASSERT_EQ(c.rt_priority, 3);
        sup_config_init(&c);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"cgroup-parent\": \"a\"}", err, sizeof err), 0);
        ASSERT_STREQ(c.cgroup_parent, "a");
        ASSERT_EQ(sup_config_apply_json(&c, "{\"cgroup_parent\": \"../x\"}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "cgroup-parent") && strstr(err, "'..'"));
        ASSERT_EQ(sup_config_apply_json(&c, "{\"cgroup_parent\": 3}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "cgroup-parent: expected a string"));
        ASSERT_EQ(sup_config_apply_json(&c, "{\"cgroup__parent\": \"a\"}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "unknown key \"cgroup__parent\""));

        char path[] = "/tmp/test-supervisor-cgparent.XXXXXX";
        int fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        write_file(path, "{\"cgroup_parent\": \"from/file\"}");
        char *a3[] = {"start", "--config", path, "--cgroup-parent", "from/cli"};
        int r3 = parse(&c, err, sizeof err, 5, a3);
        char got3[256];
        snprintf(got3, sizeof got3, "%s", c.cgroup_parent);
        char *a4[] = {"start", "--config", path};
        int r4 = parse(&c, err, sizeof err, 3, a4);
        unlink(path);
        ASSERT_EQ(r3, 0);
        ASSERT_STREQ(got3, "from/cli");
        ASSERT_EQ(r4, 0);
        ASSERT_STREQ(c.cgroup_parent, "from/file");
}

TEST(glibc_tunables_string) {
        ASSERT_TRUE(!sup_tunables_has(NULL, "glibc.malloc.tcache_count"));
        ASSERT_TRUE(!sup_tunables_has("", "glibc.malloc.tcache_count"));
        ASSERT_TRUE(sup_tunables_has("glibc.malloc.tcache_count=3", "glibc.malloc.tcache_count"));
        ASSERT_TRUE(sup_tunables_has("glibc.malloc.perturb=1:glibc.malloc.tcache_count=0", "glibc.malloc.tcache_count"));
        ASSERT_TRUE(sup_tunables_has("a=1:glibc.malloc.tcache_count=0:b=2", "glibc.malloc.tcache_count"));
        /* A longer name with the same start, a value that looks like the name, no '='. */
        ASSERT_TRUE(!sup_tunables_has("glibc.malloc.tcache_count_x=1", "glibc.malloc.tcache_count"));
        ASSERT_TRUE(!sup_tunables_has("glibc.malloc.tcache_max=glibc.malloc.tcache_count", "glibc.malloc.tcache_count"));
        ASSERT_TRUE(!sup_tunables_has("glibc.malloc.tcache_count", "glibc.malloc.tcache_count"));
        ASSERT_TRUE(!sup_tunables_has("x.glibc.malloc.tcache_count=1", "glibc.malloc.tcache_count"));

        char buf[64];
        ASSERT_EQ(sup_tunables_prepend("glibc.malloc.tcache_count=0", NULL, buf, sizeof buf), 0);
        ASSERT_STREQ(buf, "glibc.malloc.tcache_count=0");
        ASSERT_EQ(sup_tunables_prepend("glibc.malloc.tcache_count=0", "", buf, sizeof buf), 0);
        ASSERT_STREQ(buf, "glibc.malloc.tcache_count=0");
        ASSERT_EQ(sup_tunables_prepend("t=0", "glibc.malloc.perturb=1:x=2", buf, sizeof buf), 0);
        ASSERT_STREQ(buf, "t=0:glibc.malloc.perturb=1:x=2");
        char small[8];
        ASSERT_EQ(sup_tunables_prepend("t=0", "a=1:b=2", small, sizeof small), -E2BIG);
        ASSERT_EQ(sup_tunables_prepend("t=0", "a=1", small, sizeof small), 0); /* 7 chars fit */
        ASSERT_STREQ(small, "t=0:a=1");
        ASSERT_EQ(sup_tunables_prepend("", "a=1", buf, sizeof buf), -EINVAL);
}

TEST(cpu_lists_on_command_line_and_in_json) {
        struct sup_config c;
        char err[256];
        char *argv[] = {"start", "--cpus", "2-15", "--housekeeping-cpus", "0-1"};
        ASSERT_EQ(parse(&c, err, sizeof err, 5, argv), 0);
        ASSERT_STREQ(c.cpus, "2-15");
        ASSERT_STREQ(c.housekeeping_cpus, "0-1");
        sup_config_init(&c);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"cpus\": \"3,5,17-18\", \"housekeeping_cpus\": \"0\"}", err, sizeof err), 0);
        ASSERT_STREQ(c.cpus, "3,5,17-18");
        ASSERT_STREQ(c.housekeeping_cpus, "0");
        ASSERT_EQ(sup_config_apply_json(&c, "{\"cpus\": 3}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "cpus") != NULL);
}

TEST(speculative_options_checked) {
        struct sup_config c;
        char err[256];
        char *ok[] = {"start", "--speculative", "ngram", "--spec-k-min", "2", "--spec-k-max", "3"};
        ASSERT_EQ(parse(&c, err, sizeof err, 7, ok), 0);
        ASSERT_STREQ(c.speculative, "ngram");
        ASSERT_EQ(c.spec_k_min, 2);
        ASSERT_EQ(c.spec_k_max, 3);
        char *mtp[] = {"start", "--speculative", "mtp"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, mtp), 0);
        ASSERT_STREQ(c.speculative, "mtp");
        char *bad_method[] = {"start", "--speculative", "draft"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, bad_method), -EINVAL);
        ASSERT_TRUE(strstr(err, "speculative") && strstr(err, "ngram") && strstr(err, "mtp"));
        char *bad_order[] = {"start", "--spec-k-min", "4", "--spec-k-max", "2"};
        ASSERT_EQ(parse(&c, err, sizeof err, 5, bad_order), -EINVAL);
        ASSERT_TRUE(strstr(err, "spec-k-min") != NULL);
        char *too_many[] = {"start", "--spec-k-max", "9"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, too_many), -EINVAL);
        ASSERT_TRUE(strstr(err, "spec-k-max") != NULL);
}

/* --draft-model: implies the draft method, goes with no other, must be absolute. */
TEST(draft_model_options_checked) {
        struct sup_config c;
        char err[256];
        char *ok[] = {"start", "--draft-model", "/models/small"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, ok), 0);
        ASSERT_STREQ(c.draft_model, "/models/small");
        char *ok2[] = {"start", "--speculative", "draft", "--draft-model", "/models/small"};
        ASSERT_EQ(parse(&c, err, sizeof err, 5, ok2), 0);
        ASSERT_STREQ(c.speculative, "draft");
        char *other[] = {"start", "--speculative", "mtp", "--draft-model", "/models/small"};
        ASSERT_EQ(parse(&c, err, sizeof err, 5, other), -EINVAL);
        ASSERT_TRUE(strstr(err, "draft-model") && strstr(err, "mtp"));
        char *relative[] = {"start", "--draft-model", "models/small"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, relative), -EINVAL);
        ASSERT_TRUE(strstr(err, "draft-model") && strstr(err, "absolute"));
        char *missing[] = {"start", "--speculative", "draft"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, missing), -EINVAL);
        ASSERT_TRUE(strstr(err, "draft-model") != NULL);
}

/* The HTTP options: limits, names, keys (repeatable, a JSON array too), exposure rules. */
TEST(http_options_parse_and_check) {
        struct sup_config c;
        char err[512];
        char *defaults[] = {"start"};
        ASSERT_EQ(parse(&c, err, sizeof err, 1, defaults), 0);
        ASSERT_EQ(c.default_max_tokens, 0);
        ASSERT_EQ(c.request_timeout_ms, 0);
        ASSERT_EQ(c.max_prompt_bytes, 256 << 10);
        ASSERT_EQ(c.header_timeout_s, 30);
        ASSERT_EQ(c.max_connections_per_ip, 0);
        char *a[] = {"start", "--served-model-name", "ds", "--served-model-name", "deepseek-r1", "--api-key", "k1",
                     "--api-key", "k2", "--default-max-tokens", "64", "--max-prompt-tokens", "100",
                     "--max-prompt-bytes", "4096", "--request-timeout-ms", "900000", "--cors-origins", "*",
                     "--max-connections-per-ip", "4", "--header-timeout-s", "5", "--body-timeout-s", "7",
                     "--first-byte-timeout-s", "3", "--idle-timeout-s", "9", "--protect-metrics", "--host", "0.0.0.0"};
        ASSERT_EQ(parse(&c, err, sizeof err, 30, a), 0);
        ASSERT_STREQ(c.served_model_names, "ds\ndeepseek-r1\n");
        ASSERT_STREQ(c.api_keys, "k1\nk2\n");
        char *names[4];
        char buf[sizeof c.served_model_names];
        memcpy(buf, c.served_model_names, sizeof buf);
        ASSERT_EQ(sup_config_list_split(buf, names, 4), 2);
        ASSERT_STREQ(names[1], "deepseek-r1");
        ASSERT_EQ(c.default_max_tokens, 64);
        ASSERT_EQ(c.max_prompt_tokens, 100);
        ASSERT_EQ(c.request_timeout_ms, 900000);
        ASSERT_EQ(c.max_connections_per_ip, 4);
        ASSERT_EQ(c.first_byte_timeout_s + c.header_timeout_s + c.body_timeout_s + c.idle_timeout_s, 24);
        ASSERT_TRUE(c.protect_metrics);

        /* the same from JSON, keys as an array; the command line's list wins whole */
        ASSERT_EQ(sup_config_apply_json(&c, "{\"api_key\": [\"x\", \"y\"], \"tls-cert\": \"/c.pem\", \"tls-key\": "
                                            "\"/k.pem\", \"allow-unauthenticated\": true}",
                                        err, sizeof err),
                  0);
        ASSERT_STREQ(c.api_keys, "k1\nk2\n");
        struct sup_config j;
        sup_config_init(&j);
        ASSERT_EQ(sup_config_apply_json(&j, "{\"api-key\": [\"x\", \"y\"], \"served-model-name\": \"m\"}", err, sizeof err), 0);
        ASSERT_STREQ(j.api_keys, "x\ny\n");
        sup_config_init(&j);
        ASSERT_EQ(sup_config_apply_json(&j, "{\"api-key\": [\"x\", 3]}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "api-key"));
        sup_config_init(&j);
        ASSERT_EQ(sup_config_apply_json(&j, "{\"api-key\": []}", err, sizeof err), -EINVAL);

        /* exposure: a non-loopback host needs a key or allow-unauthenticated */
        char *open[] = {"start", "--host", "0.0.0.0"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, open), -EINVAL);
        ASSERT_TRUE(strstr(err, "0.0.0.0") && strstr(err, "allow-unauthenticated"));
        char *allowed[] = {"start", "--host", "::", "--allow-unauthenticated"};
        ASSERT_EQ(parse(&c, err, sizeof err, 4, allowed), 0);
        char *keyfile[] = {"start", "--host", "10.0.0.1", "--api-key-file", "/etc/keys"};
        ASSERT_EQ(parse(&c, err, sizeof err, 5, keyfile), 0);
        char *loop[] = {"start", "--host", "127.0.0.2"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, loop), 0);
        char *protect[] = {"start", "--protect-metrics"};
        ASSERT_EQ(parse(&c, err, sizeof err, 2, protect), -EINVAL);
        ASSERT_TRUE(strstr(err, "protect-metrics"));
        char *half_tls[] = {"start", "--tls-cert", "/c.pem"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, half_tls), -EINVAL);
        ASSERT_TRUE(strstr(err, "tls-key"));
        char *two_ids[] = {"start", "--model-id", "a", "--served-model-name", "b"};
        ASSERT_EQ(parse(&c, err, sizeof err, 5, two_ids), -EINVAL);
        char *newline_key[] = {"start", "--api-key", "sec\nret"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, newline_key), -EINVAL);
        ASSERT_TRUE(!strstr(err, "sec")); /* a rejected key is not echoed */
        char *bad_timeout[] = {"start", "--idle-timeout-s", "0"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, bad_timeout), -EINVAL);

        ASSERT_EQ(sup_host_is_loopback("127.0.0.1"), 1);
        ASSERT_EQ(sup_host_is_loopback("::1"), 1);
        ASSERT_EQ(sup_host_is_loopback("::ffff:127.0.0.9"), 1);
        ASSERT_EQ(sup_host_is_loopback("::"), 0);
        ASSERT_EQ(sup_host_is_loopback("192.168.1.1"), 0);
        ASSERT_EQ(sup_host_is_loopback("localhost"), 0);
}

/* --kv-dtype and "kv-dtype": passed to the workers as given; a bad value names the key
 * and the choices; unset leaves the worker's default (bf16). */
TEST(kv_dtype_command_line_and_file) {
        struct sup_config c;
        char err[256];
        char *a0[] = {"start"};
        ASSERT_EQ(parse(&c, err, sizeof err, 1, a0), 0);
        ASSERT_EQ(c.kv_dtype[0], 0);
        char *a1[] = {"start", "--kv-dtype", "int8"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, a1), 0);
        ASSERT_TRUE(strcmp(c.kv_dtype, "int8") == 0);
        char *a2[] = {"start", "--kv-dtype", "fp16"};
        ASSERT_EQ(parse(&c, err, sizeof err, 3, a2), -EINVAL);
        ASSERT_TRUE(strstr(err, "kv-dtype") && strstr(err, "fp16") && strstr(err, "bf16"));
        sup_config_init(&c);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"kv-dtype\": \"fp8\"}", err, sizeof err), 0);
        ASSERT_TRUE(strcmp(c.kv_dtype, "fp8") == 0);
        ASSERT_EQ(sup_config_apply_json(&c, "{\"kv-dtype\": 8}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "kv-dtype: expected a string"));
        ASSERT_EQ(sup_config_apply_json(&c, "{\"kv-dtype\": \"f16\"}", err, sizeof err), -EINVAL);
        ASSERT_TRUE(strstr(err, "kv-dtype") && strstr(err, "f16"));
}
