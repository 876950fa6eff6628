/* systemd notification (libsystemd's sd-daemon) behind the plain calls declared in
 * dsv_platform.h, "systemd notify". Every call is a no-op (returning 0) when the process
 * was not started by systemd: no $NOTIFY_SOCKET, no $LISTEN_FDS. */
#include <errno.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

#include "dsv_platform.h"

int dsv_notify(const char *state) {
        if (!state)
                return -EINVAL;
        return sd_notify(0, state);
}

int dsv_notify_with_fds(const char *state, const int *fds, size_t n_fds) {
        if (!state || (n_fds && !fds))
                return -EINVAL;
        return sd_pid_notify_with_fds(0, 0, state, fds, (unsigned)n_fds);
}

int dsv_notify_watchdog_usec(uint64_t *ret_usec) {
        uint64_t usec = 0;
        int r = sd_watchdog_enabled(0, &usec);
        if (r > 0 && ret_usec)
                *ret_usec = usec;
        return r;
}

int dsv_notify_listen_fds(char ***ret_names) {
        char **names = NULL;
        /* unset_environment=1: the workers we spawn must not think the fds are theirs. */
        int n = sd_listen_fds_with_names(1, &names);
        if (n <= 0) {
                dsv_notify_names_free(names);
                return n;
        }
        if (ret_names)
                *ret_names = names;
        else
                dsv_notify_names_free(names);
        return n;
}

void dsv_notify_names_free(char **names) {
        if (!names)
                return;
        for (char **p = names; *p; p++)
                free(*p);
        free(names);
}
