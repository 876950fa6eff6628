/* Worker hygiene: die with the parent, drain on SIGTERM.
 *
 * PR_SET_PDEATHSIG fires when the thread that forked us exits, and is lost if the
 * parent died before the prctl; so we also compare getppid() with the parent we started
 * with (DSV_PARENT_PID from the supervisor when set) right after the prctl and on every
 * loop iteration (hygiene_orphaned). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "worker.h"

volatile sig_atomic_t hygiene_drain_requested;
static pid_t parent_pid;

int hygiene_bind_to_parent(void) {
        const char *env = getenv("DSV_PARENT_PID");
        parent_pid = env && *env ? (pid_t)strtol(env, NULL, 10) : getppid();
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
                return -errno;
        return hygiene_orphaned() ? -ESRCH : 0;
}

int hygiene_orphaned(void) {
        return parent_pid > 0 && getppid() != parent_pid;
}

static void on_term(int sig) {
        (void)sig;
        hygiene_drain_requested = 1;
}

int hygiene_install_signals(void) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
                return -errno;
        sa.sa_handler = SIG_IGN;
        if (sigaction(SIGPIPE, &sa, NULL) < 0)
                return -errno;
        return 0;
}
