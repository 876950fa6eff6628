/* The supervisor's malloc thread cache (tcache), capped through a re-exec.
 *
 * Why: the hour-long soaks of `dsvisor start` (bench/soak.sh) were flat on every
 * series but the supervisor's anonymous RSS, which crept up steadily and
 * slowed down as it went. heaptrack showed a flat live heap; with
 * GLIBC_TUNABLES=glibc.malloc.tcache_count=0 [heap] stayed flat. The creep is glibc's
 * per-thread cache of freed chunks (up to 7 chunks in each of 64 size classes, freed
 * only when the thread exits) in the ~17 threads that live as long as the supervisor
 * (nng's, libmicrohttpd's listener, the gateway link thread, the main loop): each
 * rarely used size class fills in its turn, so RSS ratchets up for hours before it
 * levels out. malloc_trim() cannot return those chunks: for malloc they are in use.
 *
 * glibc reads its tunables once, in the dynamic loader, before main(); mallopt() has no
 * knob for the tcache. So `dsvisor start` execs itself again (same pid, argv, name and fds:
 * systemd's MAINPID, NOTIFY_SOCKET and fd-store fds stay valid) with the tunable added
 * to GLIBC_TUNABLES (the user's other tunables kept). The re-executed supervisor then puts GLIBC_TUNABLES back as the
 * user had it, so workers and any other child get the original environment: a worker's
 * decode loop keeps its tcache. A tcache_count set by the user is left alone. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "sup.h"

#define TUNABLES_ENV "GLIBC_TUNABLES"
/* Set for the re-executed process only: "-" when GLIBC_TUNABLES was unset, "+<value>"
 * when it was set. Its presence also stops a second re-exec. */
#define ORIG_ENV "DSV_ORIG_GLIBC_TUNABLES"

bool sup_tunables_has(const char *tunables, const char *name) {
        if (!tunables || !name || !*name)
                return false;
        size_t n = strlen(name);
        for (const char *p = tunables; *p;) {
                const char *end = strchr(p, ':');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                if (len > n && strncmp(p, name, n) == 0 && p[n] == '=')
                        return true;
                if (!end)
                        break;
                p = end + 1;
        }
        return false;
}

int sup_tunables_prepend(const char *item, const char *tunables, char *buf, size_t size) {
        if (!item || !*item || !buf)
                return -EINVAL;
        int n = tunables && *tunables ? snprintf(buf, size, "%s:%s", item, tunables) : snprintf(buf, size, "%s", item);
        if (n < 0 || (size_t)n >= size)
                return -E2BIG;
        return 0;
}

/* Puts GLIBC_TUNABLES back from the marker and drops the marker. */
static void restore_env(const char *orig) {
        if (orig[0] == '+')
                setenv(TUNABLES_ENV, orig + 1, 1);
        else
                unsetenv(TUNABLES_ENV);
        unsetenv(ORIG_ENV);
}

int sup_malloc_tcache_cap(char **argv) {
#ifndef __GLIBC__
        (void)argv;
        return 0;
#else
        const char *orig = getenv(ORIG_ENV);
        if (orig) {
                /* We are the re-executed process: glibc has read the tunable. The marker
                 * is copied before restore_env() edits the environment it lives in. */
                char *saved = strdup(orig);
                if (!saved)
                        return -ENOMEM;
                restore_env(saved);
                free(saved);
                /* The kernel named the process after the path's last component, "exe";
                 * ps, top, pgrep and journald's _COMM should show what was run (and the
                 * threads started from here inherit the name). */
                const char *base = argv[0] ? strrchr(argv[0], '/') : NULL;
                if (argv[0])
                        (void)prctl(PR_SET_NAME, base ? base + 1 : argv[0], 0, 0, 0);
                return 1;
        }
        const char *cur = getenv(TUNABLES_ENV);
        if (sup_tunables_has(cur, "glibc.malloc.tcache_count"))
                return 0; /* the user's choice */

        static char tunables[4096], marker[4096 + 2];
        /* First, not last: glibc 2.36 (Debian 12) parses the exec'd copy in place and
         * leaves only the first item readable in /proc/<pid>/environ (getenv() sees a
         * whole copy); first, the tunable in effect is the one an operator sees there. */
        int r = sup_tunables_prepend("glibc.malloc.tcache_count=" SUP_TCACHE_COUNT, cur, tunables, sizeof tunables);
        if (r < 0) {
                fprintf(stderr, "<4>dsvisor: GLIBC_TUNABLES is too long to add glibc.malloc.tcache_count, ignoring\n");
                return r;
        }
        snprintf(marker, sizeof marker, "%s%s", cur ? "+" : "-", cur ? cur : "");
        if (setenv(ORIG_ENV, marker, 1) < 0 || setenv(TUNABLES_ENV, tunables, 1) < 0) {
                r = -errno;
                restore_env(marker);
                return r;
        }
        fflush(NULL);
        execv("/proc/self/exe", argv);
        r = -errno;
        restore_env(marker);
        fprintf(stderr,
                "<4>dsvisor: Failed to re-execute /proc/self/exe with glibc.malloc.tcache_count=" SUP_TCACHE_COUNT
                ": %s, ignoring (the supervisor's thread caches stay on)\n",
                strerror(-r));
        return r;
#endif
}
