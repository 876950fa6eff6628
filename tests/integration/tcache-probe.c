/* LD_PRELOAD probe for test-supervisor-malloc-env: tells whether glibc's per-thread malloc
 * cache (tcache) is on in the process it is loaded into, from a constructor (after the
 * tunables are read, before main). A freed 24-byte chunk goes to the thread's tcache when
 * it is on (mallinfo2 counts it as in use) and to a fastbin when tcache_count is 0
 * (counted in fsmblks). Appends "tcache on" or "tcache off" to $TCACHE_PROBE_DIR/<pid>:
 * a process that re-executes itself writes two lines under one pid. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void probe(void) {
        const char *dir = getenv("TCACHE_PROBE_DIR");
        if (!dir)
                return;
        /* Measured between the allocations and the free: the allocations may take chunks
         * other libraries' constructors left in the fastbins. */
        void *volatile a = malloc(24);
        void *volatile b = malloc(24); /* keeps a away from the top chunk */
        size_t before = mallinfo2().fsmblks;
        free(a);
        size_t after = mallinfo2().fsmblks;
        free(b);
        char path[4096];
        snprintf(path, sizeof path, "%s/%d", dir, (int)getpid());
        FILE *f = fopen(path, "ae");
        if (!f)
                return;
        fprintf(f, "tcache %s\n", after > before ? "off" : "on");
        fclose(f);
}
