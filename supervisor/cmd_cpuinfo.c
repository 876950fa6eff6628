/* dsvisor cpuinfo: what the engine detected and which kernels it will run. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dse.h"

int dsv_cmd_cpuinfo(int argc, char **argv) {
        if (argc > 1) {
                fprintf(stderr, "usage: dsvisor cpuinfo\n  Honours DSV_CPU=scalar|avx2|avx512.\n");
                return strcmp(argv[1], "--help") == 0 ? 0 : 2;
        }
        struct dse_cpu_info cpu;
        struct dse_diag diag = {{0}};
        if (dse_cpu_detect(&cpu, &diag) < 0) {
                fprintf(stderr, "dsvisor: %s\n", diag.msg);
                return 1;
        }
        char buf[1024];
        dse_cpu_info_format(&cpu, buf, sizeof buf);
        fputs(buf, stdout);
        return 0;
}
