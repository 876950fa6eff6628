/* SCHED_FIFO under RT group scheduling, on this kernel: a task in a new
 * v1 cpu group is refused FIFO with EPERM (the group's cpu.rt_runtime_us is 0), and is
 * granted it once the group gets RT runtime — the two paths dsvisor start takes (grant
 * through dsv_cgroup_limits.cpu_rt_runtime_us, else fall back to SCHED_OTHER). The task
 * is a sleeping child: a FIFO thread that sleeps costs nothing, so this is safe on a
 * 2-core machine. Needs root and a v1 cpu hierarchy with cpu.rt_runtime_us; skipped
 * (exit 77) otherwise. The group is created below our own and removed. */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sup.h"
#include "t.h"

static char group[512];

static int write_str(const char *dir, const char *file, const char *val) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        FILE *f = fopen(path, "w");
        if (!f)
                return -errno;
        int r = fputs(val, f) < 0 ? -EIO : 0;
        if (fclose(f) != 0 && r == 0)
                r = -errno;
        return r;
}

/* Our own v1 cpu group, from /proc/self/cgroup ("N:cpu,cpuacct:/path" or "N:cpu:/path"). */
static int own_cpu_group(char *buf, size_t size) {
        FILE *f = fopen("/proc/self/cgroup", "re");
        char line[1024];
        int r = -ENOENT;
        while (f && fgets(line, sizeof line, f)) {
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = 0;
                char *ctrls = c1 + 1, *path = c2 + 1;
                path[strcspn(path, "\n")] = 0;
                for (char *tok = strtok(ctrls, ","); tok; tok = strtok(NULL, ","))
                        if (strcmp(tok, "cpu") == 0) {
                                snprintf(buf, size, "/sys/fs/cgroup/cpu%s", strcmp(path, "/") ? path : "");
                                r = 0;
                        }
        }
        if (f)
                fclose(f);
        return r;
}

TEST(fifo_eperm_without_rt_runtime_then_granted) {
        char own[400], path[600];
        ASSERT_OK(own_cpu_group(own, sizeof own));
        snprintf(group, sizeof group, "%s/test-supervisor-rt-%d", own, (int)getpid());
        ASSERT_EQ(mkdir(group, 0755), 0);
        pid_t child = fork();
        if (child == 0) {
                for (;;)
                        pause();
        }
        ASSERT_TRUE(child > 0);
        char pid[16];
        snprintf(pid, sizeof pid, "%d", (int)child);
        int r = write_str(group, "tasks", pid);
        char policy[64] = "";
        int fifo_denied = 0, fifo_granted = 0;
        if (r == 0) {
                r = sup_thread_set_fifo(child, 10);
                fifo_denied = r == -EPERM;
                sup_thread_policy_format(child, policy, sizeof policy);
                fifo_denied = fifo_denied && strcmp(policy, "SCHED_OTHER") == 0;
                /* grant: 10 ms per 1 s period is enough for a thread that sleeps */
                if (write_str(group, "cpu.rt_runtime_us", "10000") == 0 && sup_thread_set_fifo(child, 10) == 0) {
                        sup_thread_policy_format(child, policy, sizeof policy);
                        fifo_granted = strcmp(policy, "SCHED_FIFO/10") == 0;
                }
        }
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        snprintf(path, sizeof path, "%s", group);
        rmdir(path);
        ASSERT_OK(r < 0 && r != -EPERM ? r : 0);
        ASSERT_TRUE(fifo_denied);
        ASSERT_TRUE(fifo_granted);
}

int main_skip_check(void) __attribute__((constructor));
int main_skip_check(void) {
        char own[400], path[600];
        if (geteuid() != 0) {
                printf("SKIP: needs root to create a cpu group\n");
                exit(77);
        }
        if (own_cpu_group(own, sizeof own) < 0) {
                printf("SKIP: no cgroup v1 cpu hierarchy here\n");
                exit(77);
        }
        snprintf(path, sizeof path, "%s/cpu.rt_runtime_us", own);
        if (access(path, W_OK) < 0) {
                printf("SKIP: no RT group scheduling here (%s)\n", path);
                exit(77);
        }
        return 0;
}
