/* libFuzzer target: `dsvisor start`'s JSON config (sup_config_apply_json) on arbitrary
 * bytes. Whatever is accepted must be a configuration the supervisor can act on; above
 * all the cgroup parent, which decides where dsvisor writes in the cgroup tree, must be
 * a relative path of plain names: no '/' at either end, no empty, '.' or '..' component. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sup.h"

static void check_parent(const char *p) {
        if (dsv_cgroup_parent_check(p, NULL) != 0 || p[0] == '/')
                abort();
        for (const char *c = p; *c;) {
                size_t n = strcspn(c, "/");
                if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
                        abort();
                c += n;
                if (*c == '/' && !*++c)
                        abort(); /* trailing '/' */
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        struct sup_config cfg;
        char err[256];
        sup_config_init(&cfg);
        if (sup_config_apply_json(&cfg, text, err, sizeof err) == 0) {
                check_parent(cfg.cgroup_parent);
                if (cfg.runtime_dir[0] && cfg.runtime_dir[0] != '/')
                        abort();
                if (cfg.restart_backoff_min_ms > cfg.restart_backoff_max_ms || cfg.rt_priority > SUP_RT_PRIORITY_MAX)
                        abort();
        } else if (!err[0]) {
                abort(); /* every refusal says why */
        }
        free(text);
        return 0;
}
