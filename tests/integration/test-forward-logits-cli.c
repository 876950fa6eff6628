/* `dsvisor logits` end to end: the real binary on a Hugging Face fixture folder, its
 * --out file compared with ref/logits.f32 and its greedy JSON with
 * ref/generated_ids.json; bad arguments give the documented exit codes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "t.h"

#define FIXTURE "llama3-rope-gqa"

static char dsvisor[1024], tmpdir[1024];

static int setup(void) {
        const char *build = getenv("DSV_BUILD_DIR");
        if (!build)
                return -ENOENT;
        snprintf(dsvisor, sizeof dsvisor, "%s/bin/dsvisor", build);
        snprintf(tmpdir, sizeof tmpdir, "%s/test-forward-logits-cli.XXXXXX", build);
        if (!mkdtemp(tmpdir))
                return -errno;
        if (!getenv("DSV_CACHE_DIR")) {
                char cache[2100];
                snprintf(cache, sizeof cache, "%s/model-cache", build);
                setenv("DSV_CACHE_DIR", cache, 1);
        }
        return 0;
}

/* Runs cmd, captures up to size-1 bytes of stdout; returns the exit status or -1. */
static int run(const char *cmd, char *out, size_t size) {
        FILE *p = popen(cmd, "r");
        if (!p)
                return -1;
        size_t n = fread(out, 1, size - 1, p);
        out[n] = 0;
        int st = pclose(p);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int read_ints(const char *s, int32_t *v, int max) {
        int n = 0;
        while (*s && n < max) {
                if ((*s >= '0' && *s <= '9') || *s == '-')
                        v[n++] = (int32_t)strtol(s, (char **)&s, 10);
                else
                        s++;
        }
        return n;
}

TEST(logits_match_reference) {
        ASSERT_OK(setup());
        char dir[1024], path[2200], cmd[16384], out[8192];
        snprintf(dir, sizeof dir, "%s/" FIXTURE, t_fixture("models"));
        size_t len;
        snprintf(path, sizeof path, "%s/ref/prompt_ids.json", dir);
        char *json = slurp(path, &len);
        ASSERT_TRUE(json);
        int32_t prompt[512], gen[16], got[64];
        int P = read_ints(json, prompt, 512);
        free(json);
        snprintf(path, sizeof path, "%s/ref/generated_ids.json", dir);
        json = slurp(path, &len);
        ASSERT_TRUE(json);
        int G = read_ints(json, gen, 16);
        free(json);
        ASSERT_EQ(G, 16);

        int n = snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --out '%s/logits.f32' --greedy 16 --tokens ", dsvisor,
                         dir, tmpdir);
        for (int i = 0; i < P; i++)
                n += snprintf(cmd + n, sizeof cmd - n, "%s%d", i ? "," : "", prompt[i]);
        ASSERT_EQ(run(cmd, out, sizeof out), 0);
        /* {"n_tokens":P,"vocab":V,"greedy":[...]} */
        const char *g = strstr(out, "\"greedy\":[");
        ASSERT_TRUE(g);
        ASSERT_EQ(read_ints(g, got, 64), 16);
        for (int i = 0; i < 16; i++)
                ASSERT_EQ(got[i], gen[i]);

        size_t len_got, len_ref;
        snprintf(path, sizeof path, "%s/logits.f32", tmpdir);
        float *mine = (float *)slurp(path, &len_got);
        snprintf(path, sizeof path, "%s/ref/logits.f32", dir);
        float *ref = (float *)slurp(path, &len_ref);
        ASSERT_TRUE(mine && ref);
        ASSERT_EQ(len_got, len_ref);
        double max_abs = 0;
        for (size_t i = 0; i < len_ref / 4; i++) {
                double d = fabs((double)mine[i] - ref[i]);
                max_abs = d > max_abs || isnan(d) ? d : max_abs;
        }
        fprintf(stderr, "  dsvisor logits on %s: %d positions, max abs %.3g vs ref/logits.f32, greedy ids identical\n",
                FIXTURE, P, max_abs);
        free(mine);
        free(ref);
        snprintf(path, sizeof path, "%s/logits.f32", tmpdir);
        remove(path);
        remove(tmpdir);
        ASSERT_TRUE(max_abs <= 1e-3);
}

TEST(bad_arguments) {
        ASSERT_OK(setup());
        char dir[1024], cmd[8192], out[1024];
        snprintf(dir, sizeof dir, "%s/" FIXTURE, t_fixture("models"));
        snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --tokens 1,x,3 2>/dev/null", dsvisor, dir);
        ASSERT_EQ(run(cmd, out, sizeof out), 2); /* usage */
        snprintf(cmd, sizeof cmd, "'%s' logits --tokens 1,2 2>/dev/null", dsvisor);
        ASSERT_EQ(run(cmd, out, sizeof out), 2); /* no model */
        snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --tokens 1,99999 2>/dev/null", dsvisor, dir);
        ASSERT_EQ(run(cmd, out, sizeof out), 1); /* token outside the vocabulary */
        snprintf(cmd, sizeof cmd, "'%s' logits --model '%s/no-such-model' --tokens 1 2>/dev/null", dsvisor, tmpdir);
        ASSERT_EQ(run(cmd, out, sizeof out), 1);
        remove(tmpdir);
}
